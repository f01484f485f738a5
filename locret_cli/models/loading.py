"""Loading a model and tokenizer from the Hub or a local directory, with the user's device, dtype and 4- or 8-bit
choice."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from locret_cli.core.attention.capture import check_projections
from locret_cli.core.attention.rope import check_supported
from locret_cli.errors import LocretError, ModelError, SettingError
from locret_cli.inputs.tokenizer import TIKTOKEN_FILE, TiktokenTokenizer
from locret_cli.runtime import bf16_weights
from locret_cli.runtime.dtype_probe import DtypeChoice, measured_cpu_dtype
from locret_cli.runtime.int8_linear import quantize_linears

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class QuestionForms(Protocol):
    """What a model trained on a few question forms knows about them (the embedded model: `EmbeddedForms`)."""

    def warning(self, question: str) -> str | None:
        """Why an answer to `question` cannot be trusted, or None when it is of a trained form."""

    def says_not_stated(self, answer: str) -> bool:
        """Whether `answer` is the model's reply that the document does not say."""

    def restated(self, question: str, answer: str) -> str | None:
        """`answer`'s value in the question's own words ("The gate code of the north depot is 4821."), or None when
        the question or the answer is not of the model's form."""


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    name: str
    defaults: dict  # engine settings recorded with the model (the embedded model has some), else empty
    dtype_reason: str = ""  # why it was loaded in its dtype, for the cost table
    question_forms: QuestionForms | None = None  # None: a general model, asked anything


def resolve_device(device: str) -> torch.device:
    """auto -> cuda when available, else cpu. cuda without CUDA is an error."""
    if device not in ("auto", "cpu", "cuda"):
        raise LocretError(f"unknown device {device!r}; choose auto, cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise SettingError("{device} cuda was asked for, but this torch build sees no CUDA device; use {device} cpu")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(device)


def choose_dtype(dtype: str, device: torch.device) -> DtypeChoice:
    """The dtype to load in, and why: auto is bf16 on CUDA and, on the CPU, whichever of bf16 and fp32 this machine
    ran faster (`runtime/dtype_probe.py`)."""
    if dtype == "auto":
        return DtypeChoice(torch.bfloat16, "bf16: auto on CUDA") if device.type == "cuda" else measured_cpu_dtype()
    if dtype not in DTYPES:
        raise LocretError(f"unknown dtype {dtype!r}; choose auto, bf16, fp16 or fp32")
    return DtypeChoice(DTYPES[dtype], f"{dtype}: asked for")


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    return choose_dtype(dtype, device).dtype


def load_model(
    name: str,
    device: str = "auto",
    dtype: str = "auto",
    load_4bit: bool = False,
    trust_remote_code: bool = False,
    load_8bit: bool = False,
    max_memory: str | None = None,
    load_int4: bool = False,
) -> LoadedModel:
    """Load a causal LM and its tokenizer by Hub id, local directory, GGUF file or known short name
    (`models/named.py`), and check locret can drive it. `load_4bit`: bitsandbytes nf4 weights; `load_8bit`: every
    linear layer's weights in int8 (`runtime/int8_linear.py`), from any source, GGUF files included; `load_int4`: in
    4 bits (`runtime/int4_linear.py`); `max_memory`
    (a size, such as 2GiB): the weights held in memory, the rest read from disk as they run (`runtime/offload.py`).
    Which of these combine is `ModelSpec.checked`'s to say, before this is called."""
    from transformers import AutoModelForCausalLM

    from locret_cli.models import gguf, gguf_cache, named
    from locret_cli.runtime import offload

    torch_device = resolve_device(device)
    choice = choose_dtype(dtype, torch_device)
    torch_dtype = choice.dtype
    source = named.resolve(name)
    cap = None if max_memory is None else offload.parse_size(max_memory)
    if gguf.is_gguf(source):
        try:
            model, tokenizer = gguf_cache.load(Path(source), torch_dtype, trust_remote_code)
        except (OSError, ValueError) as exc:
            raise ModelError(_explain_load_failure(source, exc)) from None
        return _checked(model.to(torch_device), tokenizer, name, choice.reason, bits(load_8bit, load_int4))
    # fp32 arithmetic on the CPU from a bf16 checkpoint: its weights stay bf16 in memory (`runtime/bf16_weights.py`)
    widened = (bf16_weights.applies(torch_device, torch_dtype) and not load_4bit and cap is None
               and stored_dtype(source, trust_remote_code) == torch.bfloat16)
    kwargs: dict = {"dtype": torch.bfloat16 if widened else torch_dtype, "trust_remote_code": trust_remote_code,
                    "attn_implementation": "sdpa"}
    if cap is not None:
        kwargs.update(offload.placement(cap))
    if load_4bit:
        if importlib.util.find_spec("bitsandbytes") is None:
            raise SettingError("{load_4bit} needs bitsandbytes: pip install 'locret-cli[4bit]'")
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch_dtype
        )
        kwargs["device_map"] = {"": str(torch_device)}
    try:
        tokenizer = load_tokenizer(source, trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as exc:
        raise ModelError(_explain_load_failure(source, exc)) from None
    reason = choice.reason
    if widened:
        bf16_weights.keep_bf16_weights(model)
        reason += "; weights quantized from bf16" if load_8bit or load_int4 else "; weights kept bf16 as stored"
    if cap is not None:
        offload.check_cap(model, cap)
        reason += f"; {offload.describe(model)}"
    placed = load_4bit or cap is not None  # accelerate placed the weights: moving them would undo it
    return _checked(model if placed else model.to(torch_device), tokenizer, name, reason, bits(load_8bit, load_int4))


def bits(load_8bit: bool, load_int4: bool) -> int | None:
    """The bits `quantize_linears` holds linear weights in, or None to leave them as loaded."""
    return 4 if load_int4 else 8 if load_8bit else None


def stored_dtype(source: str, trust_remote_code: bool = False) -> torch.dtype | None:
    """The dtype a checkpoint's config says its weights are stored in, or None where it says none or has none."""
    from transformers import AutoConfig

    try:
        dtype = getattr(AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code), "dtype", None)
    except (OSError, ValueError):
        return None
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    return dtype if isinstance(dtype, torch.dtype) else None


def quantize(model, linear_bits: int | None) -> str:
    """Hold `model`'s linear weights in `linear_bits` (`quantize_linears`; None leaves them as loaded): what the
    dtype's reason gains."""
    if linear_bits is None:
        return ""
    quantize_linears(model, linear_bits)
    return f"; linear weights in {'int4' if linear_bits == 4 else 'int8'}"


def _checked(model, tokenizer, name: str, dtype_reason: str, linear_bits: int | None = None) -> LoadedModel:
    model.eval()
    dtype_reason += quantize(model, linear_bits)
    check_supported(model.config)
    check_projections(model)
    return LoadedModel(model, tokenizer, name, {}, dtype_reason)


def load_tokenizer(name: str, trust_remote_code: bool = False):
    """A local directory with `tokenizer.tiktoken` gets locret's tiktoken tokenizer; anything else AutoTokenizer."""
    from transformers import AutoTokenizer

    ranks = Path(name) / TIKTOKEN_FILE
    if ranks.is_file():
        return TiktokenTokenizer.from_file(ranks)
    return AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)


def _explain_load_failure(name: str, exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if Path(name).exists():
        return f"cannot load the model in {name}: {text}"
    if "/" in name or not Path(name).is_absolute():
        offline = "offline" in text.lower() or "connect" in text.lower() or "resolve" in text.lower()
        how = (
            "this machine cannot reach the Hub and the model is not in the local cache"
            if offline
            else "it is neither a local directory nor a Hub model this machine could fetch"
        )
        return (
            f"cannot load model {name!r}: {how}; download it where there is network "
            f"(`hf download {name}`) or pass a local directory to --model"
        )
    return f"cannot load model {name!r}: {text}"
