"""The embedded-model curriculum resumes exactly from a mid-stage checkpoint (sessions chain on it), and a
keep-best stage ends on the weights that scored best on the validation split, an averaging one on the moving
average of its last weights."""

from __future__ import annotations

import torch

from locret_cli.inputs.tokenizer import TiktokenTokenizer
from recipes.embedded import pretrain as pretrain_module
from recipes.embedded.pretrain import PretrainConfig, Stage, Validation, pretrain
from recipes.embedded.validation import validation_set

TINY = dict(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64, max_positions=256)


def test_a_paused_and_resumed_curriculum_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    stages = [Stage(24, 2, 1, 2, 2.0, 0.0),  # thresholds never pass
              Stage(40, 2, 1, 2, 2.0, 0.5, fragmented=0.5, keep_best=True)]
    monkeypatch.setattr(pretrain_module, "STAGES", stages)
    monkeypatch.setattr(pretrain_module.FillerPool, "generated", _small_pool)
    monkeypatch.setattr(pretrain_module, "validation_set", lambda tokenizer, n, absent=0: validation_set(tokenizer, n, 60, absent))
    tokenizer = TiktokenTokenizer.byte_level()
    cfg = dict(TINY, max_steps_per_stage=3, checkpoint_every=1, validate_every=1, validation_documents=2)
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


def test_a_keep_best_stage_ends_on_its_best_validated_weights(tmp_path, monkeypatch):
    monkeypatch.setattr(pretrain_module, "STAGES", [Stage(24, 2, 1, 2, 2.0, 0.0, keep_best=True)])
    monkeypatch.setattr(pretrain_module.FillerPool, "generated", _small_pool)
    monkeypatch.setattr(pretrain_module, "validation_set", lambda tokenizer, n, absent=0: [])
    scores, seen = iter([0.2, 0.6, 0.4]), []

    def scripted(model, batches, absent=0):
        seen.append({name: tensor.clone() for name, tensor in model.state_dict().items()})
        score = next(scores)
        return Validation(score, score, None)

    monkeypatch.setattr(pretrain_module, "validation_accuracy", scripted)
    cfg = PretrainConfig(**TINY, max_steps_per_stage=5, validate_every=2)
    model, done = pretrain(TiktokenTokenizer.byte_level(), tmp_path, cfg, lambda _: None)
    assert done and len(seen) == 3  # steps 0, 2 and 4, the last
    assert torch.load(tmp_path / "best.pt", weights_only=True)["step"] == 2
    assert not torch.equal(seen[1]["model.norm.weight"], seen[2]["model.norm.weight"])
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, seen[1][name])


def test_an_averaging_stage_ends_on_the_moving_average_of_its_last_steps(tmp_path, monkeypatch):
    monkeypatch.setattr(pretrain_module.FillerPool, "generated", _small_pool)
    monkeypatch.setattr(pretrain_module, "validation_set", lambda tokenizer, n, absent=0: [])
    cfg = PretrainConfig(**TINY, window=1, validate_every=1, average_decay=0.5)  # passes at step 0, ends at step 3

    def run(average_last: int, out):
        seen = []

        def scripted(model, batches, absent=0):  # each validation scores higher, so the last weights are the best
            seen.append({name: tensor.clone() for name, tensor in model.state_dict().items()})
            return Validation(len(seen), len(seen), None)

        monkeypatch.setattr(pretrain_module, "validation_accuracy", scripted)
        monkeypatch.setattr(pretrain_module, "STAGES",
                            [Stage(24, 2, 1, 2, 0.0, 0.0, settle=3, keep_best=True, average_last=average_last)])
        out.mkdir()
        model, _ = pretrain(TiktokenTokenizer.byte_level(), out, cfg, lambda _: None)
        return model, seen

    _, raw = run(0, tmp_path / "raw")  # the weights after steps 0-3
    averaged, _ = run(2, tmp_path / "averaged")  # the average starts at step 1 and takes in steps 2 and 3
    for name, tensor in averaged.state_dict().items():
        expected = 0.5 * (0.5 * raw[1][name] + 0.5 * raw[2][name]) + 0.5 * raw[3][name]
        assert torch.allclose(tensor, expected), name
    assert not torch.allclose(averaged.state_dict()["model.norm.weight"], raw[3]["model.norm.weight"])


def _small_pool(tokenizer, split, seed, characters=0):
    return pretrain_module.FillerPool(tokenizer.encode("Filler words about the harbour and the mill. " * 200))
