"""`ModelSpec`: which model to load and how, in plain values (no torch), so that it crosses to worker processes,
Ray actors and bench cells. `api.load_session(spec)` loads it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from locret_cli.core.settings import DEFAULT_POLICY


@dataclass(frozen=True)
class ModelSpec:
    """`model` is a Hub id, a local directory, a `.gguf` file or a known short name (None: the embedded model);
    `arch` instead builds a real model shape with random weights (`models/arch.py`) for speed and memory figures.
    `heads` None takes those shipped for the model, if any; `reader` None likewise takes the reader shipped for it
    (`core/reader.py`), "off" none, else a reader's directory."""

    model: str | None = None
    heads: str | None = None
    policy: str = DEFAULT_POLICY
    device: str = "auto"
    dtype: str = "auto"
    load_4bit: bool = False
    load_8bit: bool = False
    trust_remote_code: bool = False
    arch: str | None = None
    max_memory: str | None = None  # a size such as 2GiB: weights past it stay on disk (`runtime/offload.py`)
    reader: str | None = None
    compile_decode: bool = False  # decode with a step compiled whole (`core/compiled_step.py`)

    def to_json(self) -> dict:
        return asdict(self)
