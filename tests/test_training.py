"""`locret train`: data formats and errors, loss going down, round trips, and exact resume."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.models import save_model_dir, tiny_model
from typer.testing import CliRunner

from locret_cli.cli import app
from locret_cli.errors import LocretError
from locret_cli.models.heads_files import load_heads
from locret_cli.models.loading import load_model
from locret_cli.training import TrainConfig, train_heads
from locret_cli.training.data import Record, load_records, tokenize
from locret_cli.training.trainer import HeadTrainer

runner = CliRunner()


def write_pairs(path, count=8):
    rows = [{"prompt": f"Item {i}: the crate holds {i * 7} lamps and {i + 3} ropes. How many lamps?",
             "answer": f"{i * 7} lamps"} for i in range(count)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture
def model_dir(tmp_path):
    return save_model_dir(tiny_model("llama"), tmp_path / "model")


def test_jsonl_bad_records_are_reported_by_line_and_skipped(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "p1", "answer": "a1"}\nnot json\n{"prompt": "p2"}\n\n{"prompt": " ", "answer": "x"}\n'
                    '{"prompt": "p3", "answer": "a3"}\n')
    warnings = []
    records = load_records(path, warnings.append)
    assert [(r.prompt, r.answer) for r in records] == [("p1", "a1"), ("p3", "a3")]
    assert [w.split(": ", 1)[0].rsplit(" ", 2)[-2:] for w in warnings] == [["line", "2"], ["line", "3"], ["line", "5"]]


def test_sharegpt_takes_the_last_assistant_turn_as_the_answer(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "Read this."}, {"from": "gpt", "value": "Done."},
                           {"from": "human", "value": "Who signed?"}, {"from": "gpt", "value": "Ada."}]},
        {"conversations": [{"from": "human", "value": "no answer here"}]},
        {"conversations": "oops"},
    ]))
    warnings = []
    records = load_records(path, warnings.append)
    assert [(r.prompt, r.answer) for r in records] == [("Read this.\n\nDone.\n\nWho signed?", "Ada.")]
    assert ["index 1" in warnings[0], "index 2" in warnings[1]] == [True, True]


@pytest.mark.parametrize("content, message", [
    (None, "no such data file"), ("", "is empty"), ("[1, 2", "not valid JSON"),
    ('{"question": "q", "reply": "r"}\n', "no usable records"),
])
def test_bad_data_files(tmp_path, content, message):
    path = tmp_path / "d.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(LocretError, match=message):
        load_records(path, lambda _: None)


def train(model_dir, data, out, steps, tmp_path, **overrides):
    loaded = load_model(str(model_dir), device="cpu", dtype="fp32")
    config = TrainConfig(steps=steps, hidden=32, lr=3e-3, save_every=5, **overrides)
    reports = []
    summary = train_heads(loaded, data, out, config, on_step=reports.append)
    return loaded, summary, reports


def untrained_accuracy(loaded, data, tmp_path) -> float:
    """Held-out top-10% overlap of freshly initialised heads: the same split, seed and labels as `train`."""
    examples = tokenize(load_records(data, lambda _: None), loaded.tokenizer, loaded.model, 10240)
    config = TrainConfig(steps=1, hidden=32)
    trainer = HeadTrainer(loaded.model, examples, tmp_path / "x", config)
    per_layer = trainer.evaluate()
    return sum(per_layer) / len(per_layer)


def test_loss_decreases_and_heads_round_trip_into_ask(tmp_path, model_dir):
    data = write_pairs(tmp_path / "d.jsonl")
    loaded, summary, reports = train(model_dir, data, tmp_path / "heads", 40, tmp_path)
    first, last = [sum(r.loss for r in part) / 5 for part in (reports[:5], reports[-5:])]
    assert last < 0.5 * first
    assert summary.steps == 40 and summary.heldout_examples == 1 and summary.train_examples == 7
    assert len(summary.heldout_per_layer) == 2
    untrained = untrained_accuracy(loaded, data, tmp_path)
    assert summary.heldout_accuracy >= untrained + 0.2, (summary.heldout_accuracy, untrained)  # 0.32 vs 0.07
    saved = json.loads((tmp_path / "heads" / "heads.json").read_text())
    assert saved["training"]["steps"] == 40 and saved["hidden"] == 32
    loaded_heads = load_heads(tmp_path / "heads", loaded.model)
    doc = tmp_path / "doc.txt"
    doc.write_text("the crate holds 21 lamps. " * 20)
    result = runner.invoke(app, ["ask", str(doc), "How many lamps?", "--model", str(model_dir), "--heads",
                                 str(tmp_path / "heads"), "--budget", "32", "--chunk-size", "16", "--max-new-tokens", "3",
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kv_cache"]["kept_tokens"] == 32
    assert loaded_heads.hidden == 32


def test_resume_equals_an_uninterrupted_run(tmp_path, model_dir):
    data = write_pairs(tmp_path / "d.jsonl")
    _, straight, _ = train(model_dir, data, tmp_path / "a", 12, tmp_path)

    loaded = load_model(str(model_dir), device="cpu", dtype="fp32")
    config = TrainConfig(steps=12, hidden=32, lr=3e-3, save_every=5)

    def interrupt(report):
        if report.step == 7:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_heads(loaded, data, tmp_path / "b", config, on_step=interrupt)
    resumed = train_heads(loaded, data, tmp_path / "b", config, resume=True)
    assert resumed.steps == 12 and resumed.final_loss == straight.final_loss
    a, b = (load_heads(tmp_path / d, loaded.model, dtype=torch.float32) for d in ("a", "b"))
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_cli_trains_refuses_to_overwrite_and_reports_bad_data(tmp_path, model_dir):
    data = write_pairs(tmp_path / "d.jsonl")
    args = ["train", "--model", str(model_dir), "--data", str(data), "--out", str(tmp_path / "h"), "--steps", "4",
            "--hidden", "16", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["steps"] == 4
    again = runner.invoke(app, args)
    assert again.exit_code == 1 and "--overwrite" in again.stderr
    assert runner.invoke(app, [*args, "--overwrite"]).exit_code == 0
    (tmp_path / "bad.jsonl").write_text("nonsense\n")
    bad = runner.invoke(app, [*args[:4], str(tmp_path / "bad.jsonl"), *args[5:], "--overwrite"])
    assert bad.exit_code == 1 and "no usable records" in bad.stderr and "line 1" in bad.stderr


def test_keep_passages_mark_their_tokens_through_the_middle_cut(tmp_path, model_dir):
    path = tmp_path / "d.jsonl"
    filler = " ".join(f"word{i}" for i in range(60))
    rows = [{"prompt": f"The code is 4821. {filler} The bell is 77. Which code?", "answer": "4821",
             "keep": ["is 4821.", "is 77."]},
            {"prompt": "p", "answer": "a", "keep": ["absent"]}, {"prompt": "p", "answer": "a", "keep": "p"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    warnings = []
    records = load_records(path, warnings.append)
    assert [r.keep for r in records] == [["is 4821.", "is 77."]]
    assert ["is not in the prompt" in warnings[0], "list of non-empty strings" in warnings[1]] == [True, True]
    loaded = load_model(str(model_dir), device="cpu", dtype="fp32")
    whole, = tokenize(records, loaded.tokenizer, loaded.model, 10240)
    text = loaded.tokenizer.decode([whole.prompt_ids[i] for i in whole.keep])
    assert text.replace(" ", "") == "is4821.is77."
    assert whole.prompt_ids == tokenize([Record(records[0].prompt, "4821")], loaded.tokenizer, loaded.model,
                                        10240)[0].prompt_ids  # marking does not change the ids
    cut, = tokenize(records, loaded.tokenizer, loaded.model, len(whole.prompt_ids) - 40)
    assert len(cut.prompt_ids) == len(whole.prompt_ids) - 40
    assert [cut.prompt_ids[i] for i in cut.keep] == [whole.prompt_ids[i] for i in whole.keep]


def test_training_goes_on_from_given_heads(tmp_path, model_dir):
    data = write_pairs(tmp_path / "d.jsonl")
    train(model_dir, data, tmp_path / "first", 12, tmp_path)
    loaded = load_model(str(model_dir), device="cpu", dtype="fp32")
    start = load_heads(tmp_path / "first", loaded.model, dtype=torch.float32)
    still = train_heads(loaded, data, tmp_path / "still", TrainConfig(steps=1, hidden=8, lr=0.0),
                        init=tmp_path / "first")
    after = load_heads(tmp_path / "still", loaded.model, dtype=torch.float32)
    assert after.hidden == start.hidden == 32 and still.config["hidden"] == 32  # the given heads' width, not 8
    for a, b in zip(start.parameters(), after.parameters(), strict=True):
        assert torch.equal(a, b)  # a step at learning rate 0 leaves the given heads as they were
    assert json.loads((tmp_path / "still" / "heads.json").read_text())["training"]["init"] == "first"
    on = train_heads(loaded, data, tmp_path / "on", TrainConfig(steps=3, hidden=32, lr=3e-3), init=tmp_path / "first")
    fresh = train_heads(loaded, data, tmp_path / "fresh", TrainConfig(steps=3, hidden=32, lr=3e-3))
    assert on.heldout_accuracy > fresh.heldout_accuracy + 0.1, (on.heldout_accuracy, fresh.heldout_accuracy)  # .39, .21


def test_cli_init_refuses_heads_that_are_not_there_and_shipped_heads_a_model_lacks(tmp_path, model_dir):
    data = write_pairs(tmp_path / "d.jsonl")
    common = ["train", "--model", str(model_dir), "--data", str(data), "--steps", "1", "--hidden", "32"]
    missing = runner.invoke(app, [*common, "--out", str(tmp_path / "a"), "--init", str(tmp_path / "nowhere")])
    assert missing.exit_code != 0 and "Traceback" not in missing.output
    unshipped = runner.invoke(app, [*common, "--out", str(tmp_path / "b"), "--init", "shipped"])
    assert unshipped.exit_code != 0 and "no heads are shipped" in unshipped.output
