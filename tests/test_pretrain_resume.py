"""The embedded-model curriculum resumes exactly from a mid-stage checkpoint (sessions chain on it)."""

from __future__ import annotations

import torch

from locret_cli.tokenizer import TiktokenTokenizer
from scripts.embedded import pretrain as pretrain_module
from scripts.embedded.pretrain import PretrainConfig, Stage, pretrain


def test_a_paused_and_resumed_curriculum_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    stages = [Stage(24, 2, 1, 2, 2.0, 0.0), Stage(40, 2, 1, 2, 2.0, 0.5, fragmented=0.5)]  # thresholds never pass
    monkeypatch.setattr(pretrain_module, "STAGES", stages)
    monkeypatch.setattr(pretrain_module.FillerPool, "__init__", _small_pool)
    tokenizer = TiktokenTokenizer.byte_level()
    cfg = dict(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64, max_positions=256, max_steps_per_stage=3,
               checkpoint_every=1)
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    straight, done = pretrain(tokenizer, tmp_path / "a", PretrainConfig(**cfg), lambda _: None)
    assert done

    clock = iter([0.0] + [0.0] * 4 + [1e9] * 100)  # the run hits its time limit after a few steps
    monkeypatch.setattr(pretrain_module.time, "time", lambda: next(clock))
    _, done = pretrain(tokenizer, tmp_path / "b", PretrainConfig(**cfg, max_minutes=1.0), lambda _: None)
    assert not done and not torch.load(tmp_path / "b" / "pretrain.pt", weights_only=True)["finished"]
    monkeypatch.setattr(pretrain_module.time, "time", lambda: 0.0)
    resumed, done = pretrain(tokenizer, tmp_path / "b", PretrainConfig(**cfg), lambda _: None, resume=True)
    assert done
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def _small_pool(self, tokenizer, split, seed, characters=0):
    self.tokens = tokenizer.encode("Filler words about the harbour and the mill. " * 200)
