"""Handing back the pages of a checkpoint's weights that a model no longer reads.

A safetensors checkpoint loaded in its own dtype leaves its weights as pages of the file mapped into memory: they
are read in as the weights are used, and count in the process's resident memory from then on. When `--load-8bit`
quantizes a linear layer, its bf16 weight has been read whole and is never read again, yet its pages stay resident:
a Qwen2.5-Coder-1.5B quantized to int8 held its 1.5 GB of int8 weights and 3.0 GB of the file's pages.
`CheckpointPages.release` tells the kernel those pages are not needed (`madvise(MADV_DONTNEED)`).

That is safe only where every page of the mapping is still the file's: a page that was written to is the process's
own copy, and dropping it would lose the write. So only mappings of `.safetensors` files whose pages are all the
file's (`Anonymous: 0 kB` in `/proc/self/smaps`) when `CheckpointPages` looks are touched, and nothing writes to
the weights of a model being quantized. A page dropped and read again later (an embedding row whose pages a tied
output layer's weight shared) is read from the file once more. Where `/proc/self/smaps` does not exist (not Linux),
nothing is released.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import re
from pathlib import Path

import torch

MADV_DONTNEED = 4  # Linux
HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$")


def unwritten_checkpoint_mappings(smaps: str) -> list[tuple[int, int]]:
    """The (start, end) addresses of the mappings of `.safetensors` files in `smaps` (the text of
    /proc/self/smaps) none of whose pages was written to."""
    found, current = [], None
    for line in smaps.splitlines():
        header = HEADER.match(line)
        if header:
            start, end, path = header.groups()
            current = (int(start, 16), int(end, 16)) if path.endswith(".safetensors") else None
        elif current is not None and line.startswith("Anonymous:"):
            if int(line.split()[1]) == 0:
                found.append(current)
            current = None
    return found


class CheckpointPages:
    """The checkpoint mappings whose pages may be dropped, as they are now."""

    def __init__(self, smaps: Path = Path("/proc/self/smaps")):
        try:
            self.mappings = unwritten_checkpoint_mappings(smaps.read_text())
        except OSError:
            self.mappings = []
        self.libc = ctypes.CDLL(None, use_errno=True) if self.mappings else None

    def release(self, tensor: torch.Tensor) -> int:
        """Drop the resident pages wholly inside `tensor`'s memory, where that lies in one of the mappings; the
        bytes handed back (0 where it lies elsewhere or the kernel refused)."""
        if tensor.device.type != "cpu":
            return 0
        start, end = tensor.data_ptr(), tensor.data_ptr() + tensor.numel() * tensor.element_size()
        if not any(first <= start and end <= last for first, last in self.mappings):
            return 0
        page = mmap.PAGESIZE
        first, last = -(-start // page) * page, end // page * page  # whole pages inside the tensor only
        if last <= first:
            return 0
        done = self.libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), MADV_DONTNEED)
        return last - first if done == 0 else 0


def trim_heap() -> bool:
    """Hand the allocator's free memory back to the kernel (glibc's `malloc_trim`): after many large temporaries are
    freed among smaller live tensors (quantizing a model), glibc may keep hundreds of MB of them resident. False where
    the C library has no `malloc_trim` (not glibc) or nothing was handed back."""
    trim = _malloc_trim()
    return trim is not None and bool(trim(ctypes.c_size_t(0)))


@functools.cache
def _malloc_trim():
    """glibc's `malloc_trim`, looked up once; None where the C library has none."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
