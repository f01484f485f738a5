"""Named ranges for torch.profiler, free when no profiler runs.

`benchmarks/profile_engine.py` splits each prefill chunk and decode step into linear layers, attention, retaining
heads, capture, top-k and gather, re-rotation and the rest by these names. `record_function` alone costs a few
microseconds per call even with no profiler running, a visible share of a decode step, so the range is only opened
while a profiler records.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch.profiler import record_function

CACHE_UPDATE = "locret.cache_update"  # appending entries to the cache's buffers
CAPTURE = "locret.capture"            # the q/k/v capture hook, the heads' own work excluded
HEADS = "locret.heads"                # the retaining heads scoring a chunk
SELECT = "locret.select"              # top-k selection and the gather that keeps what it chose
REROTATE = "locret.rerotate"          # moving kept keys to their new positions
FREQUENCIES = "locret.frequencies"    # the rotary module's run that reports dynamic frequencies
TOKENIZE = "locret.tokenize"          # turning the document's text into the next chunk's ids
WIDEN = "locret.widen"                # bf16 weights widened to fp32 for a chunk's product (runtime/bf16_weights.py)
ROWS_KERNEL = "locret.rows_bf16w"     # a few rows times bf16 weights by locret's kernel (runtime/native_rows.py)


def mark(name: str):
    """A `record_function(name)` range while a profiler records, else a no-op context."""
    return record_function(name) if torch.autograd.profiler._is_profiler_enabled else nullcontext()
