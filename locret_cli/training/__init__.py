"""`locret train`: retaining heads for any supported model, from prompt/answer data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from locret_cli.core.identity import weights_identity
from locret_cli.models.heads_files import save_heads
from locret_cli.models.loading import LoadedModel
from locret_cli.training.data import load_records, tokenize
from locret_cli.training.trainer import HeadTrainer, StepReport, TrainConfig, TrainSummary, check_heads_output

__all__ = ["StepReport", "TrainConfig", "TrainSummary", "train_heads"]


def descriptive_name(model: str) -> str:
    """What provenance records of a model: a Hub id as it is, a local directory by its last name only, so no machine
    path ends up in heads that are shared or shipped."""
    path = Path(model)
    return path.name if path.is_absolute() or path.exists() else model


def train_heads(
    loaded: LoadedModel,
    data: str | Path,
    out: str | Path,
    config: TrainConfig,
    max_len: int = 10240,
    resume: bool = False,
    overwrite: bool = False,
    warn: Callable[[str], None] = lambda _: None,
    on_step: Callable[[StepReport], None] | None = None,
) -> TrainSummary:
    """Train heads for `loaded.model` on `data` and save them in `out` (heads.safetensors + heads.json)."""
    out = Path(out)
    check_heads_output(out, resume, overwrite)
    model = loaded.model.requires_grad_(False).eval()
    examples = tokenize(load_records(data, warn), loaded.tokenizer, model, max_len)
    trainer = HeadTrainer(model, examples, out, config)
    if resume and not trainer.resume():
        warn(f"no checkpoint in {out}; starting from step 0")
    summary = trainer.train(on_step)
    save_heads(trainer.heads, out, extra={
        "model": descriptive_name(loaded.name), "model_identity": weights_identity(model), "data": Path(data).name,
        "training": {**asdict(config), "max_len": max_len, "final_loss": summary.final_loss,
                     "heldout_accuracy": summary.heldout_accuracy}})
    return summary
