"""`ModelSpec`: which model to load and how, in plain values (no torch), so that it crosses to worker processes,
Ray actors and bench cells. `api.load_session(spec)` loads it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from locret_cli.errors import LocretError, SettingError
from locret_cli.settings import DEFAULT_POLICY, POLICY_NAMES


@dataclass(frozen=True)
class ModelSpec:
    """`model` is a Hub id, a local directory, a `.gguf` file or a known short name (None: the embedded model);
    `arch` instead builds a real model shape with random weights (`models/arch.py`) for speed and memory figures.
    `heads` None takes those shipped for the model, if any; `reader` None likewise takes the reader shipped for it
    (`core/answer/reader.py`), "off" none, else a reader's directory."""

    model: str | None = None
    heads: str | None = None
    policy: str | None = None  # None: DEFAULT_POLICY, once checked
    device: str = "auto"
    dtype: str = "auto"
    load_4bit: bool = False
    load_8bit: bool = False
    trust_remote_code: bool = False
    arch: str | None = None
    max_memory: str | None = None  # a size such as 2GiB: weights past it stay on disk (`runtime/offload.py`)
    reader: str | None = None
    compile_decode: bool = False  # decode with a step compiled whole (`core/answer/compiled_step.py`)

    def to_json(self) -> dict:
        return asdict(self)

    def checked(self) -> "ModelSpec":
        """This spec with its policy named (DEFAULT_POLICY unless one is given), or a one-line SettingError where its
        options do not combine: the one place those rules live (`load_session` asks it, and every command that loads
        a model). A GGUF file is told by its name and header alone."""
        spec = replace(self, policy=self.policy or DEFAULT_POLICY)
        spec._check_options()
        return spec

    def _check_options(self) -> None:
        if self.policy not in POLICY_NAMES:
            raise LocretError(f"unknown policy {self.policy!r}; choose one of {', '.join(POLICY_NAMES)}")
        if self.model and self.arch:
            raise SettingError("choose {model} or {arch}, not both")
        if self.load_4bit and self.load_8bit:
            raise SettingError("choose {load_4bit} or {load_8bit}, not both")
        if self.arch is not None:
            from locret_cli.models.arch import PRESETS

            if self.arch not in PRESETS:
                raise LocretError(f"unknown shape preset {self.arch!r}; choose one of {', '.join(PRESETS)}")
            if self.load_4bit or self.max_memory:
                raise SettingError("{load_4bit} and {max_memory} apply to {model}; {arch} builds its random weights "
                                   "in memory, in {dtype}")
            return
        if self.model is None:
            if self.load_4bit or self.load_8bit or self.max_memory:
                raise SettingError("{load_4bit}, {load_8bit} and {max_memory} apply to {model}; the embedded model "
                                   "is already tiny")
            return
        if self.max_memory is not None and (self.load_4bit or self.load_8bit or self._on_cuda()):
            raise SettingError("{max_memory} keeps bf16, fp16 or fp32 weights on disk for the CPU; it does not "
                               "combine with {load_4bit}, {load_8bit} or {device} cuda")
        from locret_cli.models import gguf, named

        if gguf.is_gguf(named.resolve(self.model)):
            if self.max_memory is not None:
                raise SettingError("{max_memory} reads weights from a safetensors checkpoint, and transformers "
                                   "cannot leave a GGUF file's on disk: convert it once with `locret convert "
                                   "{source} DIR`, then pass {model} DIR", source=self.model)
            if self.load_4bit:
                raise SettingError("{load_4bit} applies to Hub and safetensors checkpoints; a GGUF file is already "
                                   "quantized")

    def _on_cuda(self) -> bool:
        if self.device != "auto":
            return self.device == "cuda"
        import torch

        return torch.cuda.is_available()
