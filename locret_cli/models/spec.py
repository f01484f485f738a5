"""`ModelSpec`: which model to load and how, in plain values (no torch), so that it crosses to worker processes,
Ray actors and bench cells. `api.load_session(spec)` loads it.

Each field is declared once, with its default and help (`option`): the command line's model options are made from
these declarations (`cli/option_groups.py`), as the reading and answering options are made from the settings'.
"""

from __future__ import annotations

from dataclasses import Field, asdict, dataclass, field

from locret_cli.core.families import PLAIN_LLAMA, spoken
from locret_cli.errors import LocretError, SettingError


def option(default, help: str, flag: str | None = None, shapes: bool = False) -> Field:
    """A ModelSpec field: its default and its command-line help; `flag` where the option is not --<name> alone (an
    on/off flag with no --no- form); `shapes` for an option only the bench takes (random-weight shapes)."""
    return field(default=default, metadata={"help": help, "flag": flag, "shapes": shapes})


@dataclass(frozen=True)
class ModelSpec:
    """`model` is a Hub id, a local directory, a `.gguf` file or a known short name (None: the embedded model);
    `arch` instead builds a real model shape with random weights (`models/arch.py`) for speed and memory figures.
    `heads` None takes those shipped for the model, if any; `reader` None likewise takes the reader shipped for it
    (`core/answer/reader.py`), "off" none, else a reader's directory."""

    model: str | None = option(None, "Hub id, local directory, .gguf file, smollm2 (SmolLM2-135M-Instruct) or "
                                     "gemma3-270m (Gemma 3 270M base), with shipped heads. Default: the embedded model.")
    arch: str | None = option(None, "A shape preset with random weights: smollm2-135m, qwen2.5-0.5b, qwen2.5-1.5b, "
                                    "llama-3.2-1b, llama-3.1-8b, phi-3-mini-128k, gemma3-1b, gemma3-4b or gemma3-12b "
                                    "(each gemma3 also as -global: every layer global). Speed and memory only.",
                              shapes=True)
    heads: str | None = option(None, "Retaining heads: a locret heads dir or an official Locret checkpoint. Default: "
                                     "those shipped for the model, if any.")
    reader: str | None = option(None, "The reader that answers from the bounded cache: a reader dir (`locret "
                                      "train-reader`), or off. Default: the one shipped for the model, if any.")
    device: str = option("auto", "auto, cpu or cuda.")
    dtype: str = option("auto", "auto (bf16 where fast), bf16, fp16 or fp32.")
    load_4bit: bool = option(False, "Load weights in 4-bit nf4 (bitsandbytes).", flag="--load-4bit")
    load_8bit: bool = option(False, "Hold the linear layers' and embeddings' weights in int8, one scale per row: half "
                                    "the bytes of bf16, so faster decoding on the CPU.", flag="--load-8bit")
    load_int4: bool = option(False, "Hold the linear layers' weights in 4 bits, a scale and zero per 32 (a 4-bit "
                                    "GGUF's blocks as they were), and the embeddings in int8: the fastest decoding on "
                                    "the CPU. CPU only.", flag="--load-int4")
    max_memory: str | None = option(None, "Hold at most this much of the model's weights in memory (such as 2GiB); the "
                                          "rest stays on disk in its safetensors file and is read layer by layer as "
                                          "it runs. CPU only; for a .gguf file, `locret convert` it first.")
    trust_remote_code: bool = option(False, "Run the model repo's own code. Off unless asked.",
                                     flag="--trust-remote-code")
    compile_decode: bool = option(False, f"Decode with a step compiled whole ({spoken(PLAIN_LLAMA)} on the CPU; needs "
                                         "a C++ compiler): faster steps after tens of seconds of compiling, for long "
                                         "answers and many questions.", flag="--compile-decode")

    def to_json(self) -> dict:
        return asdict(self)

    def checked(self) -> "ModelSpec":
        """This spec, or a one-line SettingError where its options do not combine: the one place those rules live
        (`load_session` asks it, and every command that loads a model). A GGUF file is told by its name and header
        alone."""
        self._check_options()
        return self

    def _check_options(self) -> None:
        if self.model and self.arch:
            raise SettingError("choose {model} or {arch}, not both")
        if sum((self.load_4bit, self.load_8bit, self.load_int4)) > 1:
            raise SettingError("choose one of {load_4bit}, {load_8bit} and {load_int4}")
        if self.load_int4 and self._on_cuda():
            raise SettingError("{load_int4} holds weights for torch's CPU int4 product; it does not combine with "
                               "{device} cuda")
        if self.arch is not None:
            from locret_cli.models.arch import PRESETS

            if self.arch not in PRESETS:
                raise LocretError(f"unknown shape preset {self.arch!r}; choose one of {', '.join(PRESETS)}")
            if self.load_4bit or self.max_memory:
                raise SettingError("{load_4bit} and {max_memory} apply to {model}; {arch} builds its random weights "
                                   "in memory, in {dtype}")
            return
        if self.model is None:
            if self.load_4bit or self.load_8bit or self.load_int4 or self.max_memory:
                raise SettingError("{load_4bit}, {load_8bit}, {load_int4} and {max_memory} apply to {model}; the "
                                   "embedded model is already tiny")
            return
        if self.max_memory is not None and (self.load_4bit or self.load_8bit or self.load_int4 or self._on_cuda()):
            raise SettingError("{max_memory} keeps bf16, fp16 or fp32 weights on disk for the CPU; it does not "
                               "combine with {load_4bit}, {load_8bit}, {load_int4} or {device} cuda")
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
