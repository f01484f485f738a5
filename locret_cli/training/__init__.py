"""`locret train`: retaining heads for any supported model, from prompt/answer data; `locret train-reader`: a reader
for a model and its heads, from documents and their questions."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from pathlib import Path

import torch

from locret_cli.core.identity import weights_identity
from locret_cli.models.heads_files import load_heads, save_heads
from locret_cli.models.loading import LoadedModel
from locret_cli.models.reader_files import READER_CONFIG
from locret_cli.training.data import load_records, tokenize
from locret_cli.training.reader_trainer import (
    ReaderConfig,
    ReaderStep,
    ReaderSummary,
    ReaderTrainer,
    load_reader_records,
)
from locret_cli.training.trainer import HeadTrainer, StepReport, TrainConfig, TrainSummary, check_output

__all__ = ["ReaderConfig", "ReaderStep", "ReaderSummary", "StepReport", "TrainConfig", "TrainSummary", "train_heads",
           "train_reader"]


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
    init: str | Path | None = None,
) -> TrainSummary:
    """Train heads for `loaded.model` on `data` and save them in `out` (heads.safetensors + heads.json): new heads,
    or those in the directory `init` (checked against the model; their width replaces `config.hidden`)."""
    out = Path(out)
    check_output(out, resume, overwrite)
    model = loaded.model.requires_grad_(False).eval()
    start = load_heads(init, model, dtype=torch.float32) if init is not None else None
    if start is not None:
        config = replace(config, hidden=start.hidden)
    examples = tokenize(load_records(data, warn), loaded.tokenizer, model, max_len)
    trainer = HeadTrainer(model, examples, out, config, start)
    if resume and not trainer.resume():
        warn(f"no checkpoint in {out}; starting from step 0")
    summary = trainer.train(on_step)
    save_heads(trainer.heads, out, extra={
        "model": descriptive_name(loaded.name), "model_identity": weights_identity(model), "data": Path(data).name,
        "training": {**asdict(config), "max_len": max_len, "init": Path(init).name if init else None,
                     "final_loss": summary.final_loss,
                     "heldout_accuracy": summary.heldout_accuracy}})
    return summary


def train_reader(
    session,
    data: str | Path,
    out: str | Path,
    config: ReaderConfig,
    resume: bool = False,
    overwrite: bool = False,
    warn: Callable[[str], None] = lambda _: None,
    on_read: Callable[[int, int], None] | None = None,
    on_step: Callable[[ReaderStep], None] | None = None,
    read: Mapping[str, object] | None = None,
) -> ReaderSummary:
    """Train a reader for `session`'s model and heads on `data` (`load_reader_records`) and save it in `out`
    (reader.safetensors + reader.json), the documents read with the read settings given in `read` (the policy, say)
    over the model's recorded ones. Documents already read into `out` are not read again."""
    out = Path(out)
    check_output(out, resume, overwrite, READER_CONFIG, "a trained reader")
    trainer = ReaderTrainer(session, load_reader_records(data), out, config, read)
    if resume and not trainer.resume():
        warn(f"no checkpoint in {out}; starting from step 0")
    trainer.prepare_reads(on_read)
    trainer.skip_unkept()
    summary = trainer.train(on_step)
    trainer.save({"model": descriptive_name(session.loaded.name), "data": Path(data).name,
                  "settings": {k: v for k, v in asdict(session.plan().read).items() if k not in ("budget", "policy")},
                  "final_loss": summary.final_loss})
    return summary
