"""A checkpoint's pages handed back once read (`runtime/mapped_pages.py`): only pages of `.safetensors` mappings never
written to, only whole pages inside the tensor, and what is read again afterwards is the file's own numbers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from helpers.models import save_model_dir, tiny_model
from safetensors.torch import load_file

from locret_cli.models.loading import load_model
from locret_cli.runtime.int8_linear import Int8Embedding, Int8Linear, quantize_rows
from locret_cli.runtime.mapped_pages import CheckpointPages, unwritten_checkpoint_mappings

SMAPS = """\
7f0000000000-7f0000100000 rw-p 00000000 fe:00 11  /models/a/model.safetensors
Size:               1024 kB
Rss:                 512 kB
Anonymous:             0 kB
7f0000200000-7f0000300000 rw-p 00000000 fe:00 12  /models/b/model.safetensors
Rss:                 512 kB
Anonymous:             8 kB
7f0000400000-7f0000500000 rw-p 00000000 00:00 0
Anonymous:             0 kB
7f0000600000-7f0000700000 r--p 00000000 fe:00 13  /usr/lib/libc.so.6
Anonymous:             0 kB
"""
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")


def test_only_checkpoint_mappings_with_no_page_written_count():
    assert unwritten_checkpoint_mappings(SMAPS) == [(0x7F0000000000, 0x7F0000100000)]


def test_memory_outside_the_mappings_is_never_touched(tmp_path):
    smaps = tmp_path / "smaps"
    smaps.write_text(SMAPS)
    pages = CheckpointPages(smaps)
    anonymous = torch.ones(1 << 20)  # this process's own memory, not in the listed mapping
    assert pages.release(anonymous) == 0 and bool((anonymous == 1).all())
    assert CheckpointPages(tmp_path / "absent").release(anonymous) == 0  # no smaps: nothing released


def resident_kib(path: Path) -> int:
    """The resident KiB of this process's mappings of `path`."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if "-" in line.split(" ")[0] and len(line.split()) >= 5:
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@linux_only
def test_pages_dropped_read_back_the_files_numbers(tmp_path):
    folder = save_model_dir(tiny_model("qwen2").to(torch.bfloat16), tmp_path / "qwen2")
    file = folder / "model.safetensors"
    model = load_model(str(folder), device="cpu", dtype="bf16").model
    weight = model.model.embed_tokens.weight
    assert weight.numel() * 2 > 4 * 4096  # several whole pages
    with torch.no_grad():
        before = model(torch.tensor([[5, 9, 13]])).logits
    pages = CheckpointPages()
    assert pages.mappings, "the checkpoint is mapped from its file"
    resident = resident_kib(file)
    assert 0 < pages.release(weight) <= weight.numel() * 2
    assert resident_kib(file) < resident
    assert torch.equal(weight, load_file(file)["model.embed_tokens.weight"])  # read from the file again
    with torch.no_grad():
        assert torch.equal(model(torch.tensor([[5, 9, 13]])).logits, before)


@linux_only
def test_load_8bit_hands_back_each_weight_it_quantized_and_keeps_the_files_numbers(tmp_path):
    folder = save_model_dir(tiny_model("llama").to(torch.bfloat16), tmp_path / "llama")
    file = folder / "model.safetensors"
    stored = load_file(file)
    model = load_model(str(folder), device="cpu", dtype="bf16", load_8bit=True).model
    quantized = [(name, layer) for name, layer in model.named_modules() if isinstance(layer, Int8Linear | Int8Embedding)]
    assert "model.embed_tokens" in dict(quantized)
    for name, layer in quantized:
        q, scale = quantize_rows(stored[f"{name}.weight"])
        assert torch.equal(layer.weight, q) and torch.equal(layer.weight_scale, scale)


def test_blocks_of_rows_quantize_as_the_whole_weight_does(monkeypatch):
    weight = torch.randn(37, 24) * torch.linspace(0.1, 3.0, 37)[:, None]
    whole = quantize_rows(weight)
    monkeypatch.setattr("locret_cli.runtime.int8_linear.BLOCK_ROWS", 5)
    blocked = quantize_rows(weight)
    assert torch.equal(blocked[0], whole[0]) and torch.equal(blocked[1], whole[1])
