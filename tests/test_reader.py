"""The reader (`core/answer/reader.py`): in force for the question and the answer only, trained on a model's own bounded
caches, saved, resumed and loaded for the model it was trained for alone."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from helpers.byte_tokenizers import byte_tokenizer
from helpers.models import save_model_dir, tiny_model
from helpers.readers import strong_reader
from safetensors.torch import load_file
from typer.testing import CliRunner

from locret_cli.api import Session
from locret_cli.api.saved_context import save_reading
from locret_cli.cli import app
from locret_cli.core.answer.reader import ReaderAdapter, reading_with
from locret_cli.errors import LocretError
from locret_cli.models.loading import LoadedModel
from locret_cli.models.reader_files import load_reader, save_reader
from locret_cli.settings import AnswerSettings, ReadSettings
from locret_cli.training.reader_trainer import ReaderConfig, ReaderRecord, ReaderTrainer, load_reader_records

runner = CliRunner()
TEXT = "".join(f"Line {i}: the crate in bay {i % 7} holds {i * 13 % 97} lamps.\n" for i in range(60))
SETTINGS = ReadSettings(policy="streaming", budget=96, chunk_size=64, stabilizers=16)
ANSWERING = AnswerSettings(max_new_tokens=12, reread=0)


def session_with(reader: ReaderAdapter | None, model=None) -> Session:
    loaded = LoadedModel(model or tiny_model("llama"), byte_tokenizer(), "tiny llama", {})
    return Session(replace(loaded, defaults={**loaded.defaults, "policy": "streaming"}), None, reader)


def document(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(TEXT)
    return str(path)


def cache_tensors(reading) -> dict[str, torch.Tensor]:
    return {f"{i}.{name}": t.clone() for i, layer in enumerate(reading.engine.cache.layers)
            for name, t in layer.tensors().items()}


def test_a_fresh_reader_changes_no_output(llama):
    reader = ReaderAdapter.for_model(llama, rank=4)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        plain = llama(ids).logits
        with reading_with(llama, reader):
            adapted = llama(ids).logits
        after = llama(ids).logits
    assert torch.equal(plain, adapted) and torch.equal(plain, after)
    assert len(reader.names) == 2 * 7  # q, k, v, o, gate, up and down in each of the 2 layers


def test_the_read_and_saved_context_are_the_same_with_a_reader_or_without(tmp_path):
    model = tiny_model("llama")
    without, with_reader = session_with(None, model), session_with(strong_reader(model), model)
    first, second = without.read(document(tmp_path), SETTINGS), with_reader.read(document(tmp_path), SETTINGS)
    saved = [save_reading(r, tmp_path / f"{name}.locret") for name, r in (("a", first), ("b", second))]
    a, b = (load_file(s.path) for s in saved)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    off = first.ask("How many lamps are in bay 3?", ANSWERING, sources=0)
    assert off.reader is None and off.to_json()["reader"] is None


def test_the_reader_changes_the_answer_and_leaves_the_documents_entries_alone(tmp_path):
    model = tiny_model("llama")
    reader = strong_reader(model)
    reading = session_with(reader, model).read(document(tmp_path), SETTINGS)
    kept = reading.kept_tokens
    before = cache_tensors(reading)
    adapted = reading.ask("How many lamps are in bay 3?", ANSWERING, sources=0)
    assert all(torch.equal(before[k], t) for k, t in cache_tensors(reading).items())
    fork = reading.engine.fork()
    fork.answer([5, 6, 7])
    forked = {f"{i}.{n}": t[:, :, :kept] for i, layer in enumerate(fork.cache.layers)
              for n, t in layer.tensors().items()}
    assert all(torch.equal(before[k], t) for k, t in forked.items())
    plain = session_with(None, model).read(document(tmp_path), SETTINGS).ask("How many lamps are in bay 3?", ANSWERING,
                                                                            sources=0)
    assert adapted.answer != plain.answer
    assert adapted.reader == "untrained" and adapted.to_json()["reader"] == "untrained"


def trainer(tmp_path, model, steps: int, save_every: int = 100) -> ReaderTrainer:
    records = [ReaderRecord(TEXT, [("How many lamps are in bay 3?", "Nine lamps."), ("Which bay?", "Bay 3.")]),
               ReaderRecord(TEXT[::-1], [("What is it?", "A crate.")])]
    config = ReaderConfig(steps=steps, rank=4, lr=1e-2, kept_share=(0.2, 0.4), uncut_share=0.0,
                          save_every=save_every)
    return ReaderTrainer(session_with(None, model), records, tmp_path / "reader", config)


def fixed_loss(t: ReaderTrainer) -> float:
    with torch.no_grad():
        return sum(t.loss(i, q, a).item() for i, q, a in t.pairs())


def test_training_lowers_the_loss_on_a_fixed_batch_and_saves_a_reader_that_loads(tmp_path):
    model = tiny_model("llama")
    t = trainer(tmp_path, model, steps=30)
    t.prepare_reads()
    assert sorted(p.name for p in (tmp_path / "reader" / "reads").iterdir()) == ["000000.locret", "000001.locret"]
    start = fixed_loss(t)
    t.train()
    assert fixed_loss(t) < 0.9 * start
    t.save({"model": "tiny llama"})
    loaded = load_reader(tmp_path / "reader", model)
    assert loaded.names == t.reader.names
    assert all(torch.equal(a, b) for a, b in zip(loaded.parameters(), t.reader.parameters()))


def test_training_resumes_where_its_checkpoint_left_off(tmp_path):
    model = tiny_model("llama")
    whole = trainer(tmp_path / "whole", model, steps=8)
    whole.prepare_reads()
    whole.train()
    stopped = trainer(tmp_path / "parts", model, steps=4, save_every=4)
    stopped.prepare_reads()
    stopped.train()
    resumed = trainer(tmp_path / "parts", model, steps=8, save_every=4)
    assert resumed.resume() and resumed.step == 4
    resumed.prepare_reads()  # the reads are on disk: nothing is read again
    assert resumed.reads_made == 0
    resumed.train()
    assert all(torch.equal(a, b) for a, b in zip(whole.reader.parameters(), resumed.reader.parameters()))


def test_a_record_that_names_its_budget_is_read_at_it_and_a_bad_budget_is_refused(tmp_path):
    data = tmp_path / "data.jsonl"
    lines = [{"document": TEXT, "questions": [{"question": "Which bay?", "answer": "Bay 3."}]},
             {"document": TEXT[::-1], "questions": [{"question": "What is it?", "answer": "A crate."}], "budget": 9000}]
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    records = load_reader_records(data)
    assert [r.budget for r in records] == [None, 9000]
    t = trainer(tmp_path, tiny_model("llama"), steps=1)
    t.records = records
    stabilizers = t.session.plan().read.stabilizers
    assert t.budget_for(1, 100_000) == max(9000, 2 * stabilizers)
    assert 20_000 <= t.budget_for(0, 100_000) <= 40_000  # drawn from the config's kept share, 20-40%
    for bad in (0, -5, 2.5, "200", True):
        data.write_text(json.dumps({**lines[1], "budget": bad}) + "\n")
        with pytest.raises(LocretError, match="data.jsonl:1: 'budget' must be a positive whole number"):
            load_reader_records(data)


def test_a_reader_for_another_model_is_refused_naming_that_model(tmp_path):
    mine, other = tiny_model("llama", seed=0), tiny_model("llama", seed=1)
    save_reader(ReaderAdapter.for_model(mine, rank=4), tmp_path / "r", mine, {"model": "tiny llama"})
    with pytest.raises(LocretError, match="trained for tiny llama, not this model"):
        load_reader(tmp_path / "r", other)
    with pytest.raises(LocretError, match="no reader in"):
        load_reader(tmp_path / "missing", mine)


def test_train_reader_and_ask_with_it_on_the_command_line(tmp_path):
    model_dir = save_model_dir(tiny_model("llama"), tmp_path / "model")
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"document": TEXT, "questions": [{"question": "Which bay?", "answer": "Bay 3."}]})
                    + "\n")
    out = tmp_path / "reader"
    common = ["--model", str(model_dir), "--policy", "streaming", "--device", "cpu", "--dtype", "fp32"]
    trained = runner.invoke(app, ["train-reader", "--data", str(data), "--out", str(out), "--steps", "3",
                                  "--rank", "2", "--json", *common])
    assert trained.exit_code == 0, trained.output
    assert json.loads(trained.stdout.strip().splitlines()[-1])["steps"] == 3
    again = runner.invoke(app, ["train-reader", "--data", str(data), "--out", str(out), "--steps", "3", *common])
    assert again.exit_code == 1 and "already holds a trained reader" in again.output
    doc = document(tmp_path)
    asked = runner.invoke(app, ["ask", doc, "Which bay?", "--reader", str(out), "--reread", "0", "--budget", "96",
                                "--chunk-size", "64", "--stabilizers", "16", "--json", *common])
    assert asked.exit_code == 0, asked.output
    assert json.loads(asked.stdout)["reader"] == str(out)
    missing = runner.invoke(app, ["ask", doc, "Which bay?", "--reader", str(tmp_path / "none"), *common])
    assert missing.exit_code == 1 and "no reader in" in missing.output and "Traceback" not in missing.output
