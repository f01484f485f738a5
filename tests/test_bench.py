"""`locret bench`: tasks, FLOP counting, and small runs through CliRunner (each cell is a real subprocess)."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from helpers.models import tiny_model
from transformers import DynamicCache
from typer.testing import CliRunner

from locret_cli.bench import parse_lengths
from locret_cli.bench.flops import FlopCounter, counting
from locret_cli.bench.scoring import contains_match
from locret_cli.bench.suite import ROW_FIELDS, row_variant
from locret_cli.bench.tasks import Question, data_samples, exact_match, generated_samples, needle_depths
from locret_cli.cli import app
from locret_cli.core.transformers_internals import cache_kwargs
from locret_cli.errors import LocretError, SettingError
from locret_cli.inputs.tokenizer import TiktokenTokenizer

runner = CliRunner()
SMALL = ["--lengths", "300", "--samples", "1", "--budget", "128", "--chunk-size", "64", "--stabilizers", "16",
         "--max-new-tokens", "4"]


def bench(*args):
    return runner.invoke(app, ["bench", *map(str, args)])


def test_lengths_parse_k_as_1024_and_reject_words():
    assert parse_lengths("4k, 16K,128k,3000") == [4096, 16384, 131072, 3000]
    with pytest.raises(LocretError, match="not a token count"):
        parse_lengths("4k,lots")


def test_needles_sit_at_their_depths_and_documents_have_the_asked_length():
    tokenizer = TiktokenTokenizer.byte_level()
    samples = generated_samples("needle", tokenizer, 2000, 3)
    assert needle_depths(3) == [0.0, 0.5, 1.0] and [s.depth for s in samples] == [0.0, 0.5, 1.0]
    for sample in samples:
        text = "".join(segment.text for segment in sample.document.segments())
        where = text.index("The pass key is") / len(text)
        assert abs(where - sample.depth) < 0.05
        assert sample.questions[0].question == "What is the pass key?"
        assert f"The pass key is {sample.questions[0].answer}. Remember it." in text
        assert abs(len(tokenizer.encode(text)) - 2000) < 40
    again = generated_samples("needle", tokenizer, 2000, 3)
    assert [s.questions for s in again] == [s.questions for s in samples]


def test_facts_documents_hold_every_fact_asked():
    tokenizer = TiktokenTokenizer.byte_level()
    (sample,) = generated_samples("facts", tokenizer, 1500, 1)
    text = "".join(segment.text for segment in sample.document.segments())
    assert len(sample.questions) >= 3
    for q in sample.questions:
        attribute_of = q.question.removeprefix("What is the ").removesuffix("?")
        assert f"The {attribute_of} is {q.answer}." in text


def test_exact_and_contains_scoring():
    assert exact_match(" Paris. ", "paris") and not exact_match("Paris, France", "Paris")
    assert contains_match("It is Paris, France", "paris") and not contains_match("Lyon", "Paris")
    assert contains_match("The pass key is 70217.", "70217") and contains_match("(70217)", "70217")
    assert not contains_match("The pass key is 702177.", "70217")  # a longer number is another number
    assert not contains_match("The code is 1702 17", "70217") and not contains_match("Parisian", "Paris")
    assert contains_match("Ms. Lucia Kowalski-Brown", "lucia kowalski") and contains_match("at 3.5 m", "3.5")


def test_a_generated_question_also_accepts_its_statement_as_the_answer():
    (sample,) = generated_samples("needle", TiktokenTokenizer.byte_level(), 800, 1)
    question = sample.questions[0]
    assert question.sentence == f"The pass key is {question.answer}."
    assert question.is_exact(question.answer) and question.is_exact(f"the pass key is {question.answer}")
    assert not question.is_exact(f"The key is {question.answer}.") and not question.is_exact("The pass key is 1.")
    assert Question("Q?", "77").is_exact(" 77. ") and not Question("Q?", "77").is_exact("The code is 77.")


def test_data_file_records_read_text_or_linked_files(tmp_path):
    (tmp_path / "book.txt").write_text("The code is 77.")
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"context": "Inline text.", "question": "Q1?", "answer": "A"}) + "\n\n"
                    + json.dumps({"context": "book.txt", "question": "Q2?", "answer": "77"}) + "\n")
    inline, linked = data_samples(data)
    assert "".join(s.text for s in inline.document.segments()) == "Inline text."
    assert "".join(s.text for s in linked.document.segments()) == "The code is 77."
    data.write_text(json.dumps({"context": "x", "question": "Q?"}) + "\n")
    with pytest.raises(LocretError, match="line 1: needs string field"):
        data_samples(data)


def test_flop_counter_matches_the_formula_for_each_call():
    model = tiny_model("llama")
    counter = FlopCounter(model)
    layers, heads, head_dim = 2, 4, 16
    decoder = sum(p.numel() for p in model.model.layers.parameters())
    with counting(model, counter), torch.no_grad():
        cache = cache_kwargs(model, DynamicCache(config=model.config))  # one cache, as the engine passes it
        model(input_ids=torch.arange(10).unsqueeze(0), **cache, use_cache=True, logits_to_keep=1)
        model(input_ids=torch.tensor([[5]]), **cache, use_cache=True, logits_to_keep=1)
    expected = sum(2 * decoder * n + 4 * layers * heads * head_dim * n * (c + (n + 1) / 2) + 2 * 64 * 300
                   for n, c in [(10, 0), (1, 10)])
    assert counter.total == pytest.approx(expected, rel=1e-9)
    first_call = 2 * decoder * 10 + 4 * layers * heads * head_dim * 10 * 5.5 + 2 * 64 * 300
    assert counter.prefill_flops == pytest.approx(first_call, rel=1e-9)  # the one-token call is decoding
    kv_read = 2 * layers * model.config.num_key_value_heads * head_dim * 10 * 4  # fp32 keys and values, 10 entries
    assert counter.decode_bytes == (decoder + 64 * 300) * 4 + kv_read  # every weight, the LM head's included
    model(input_ids=torch.arange(3).unsqueeze(0))
    assert counter.total == pytest.approx(expected, rel=1e-9), "the hook outlived its context"


def test_bench_json_rows_for_each_policy_with_the_same_cache():
    result = bench("--policies", "locret,streaming,snapkv,full", *SMALL, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"config", "rows"}
    assert data["config"]["settings"]["budget"] == 128 and data["config"]["matmul_flops_per_s"] > 0
    assert data["config"]["peak_memory_measures"] == "cpu peak RSS"
    assert data["config"]["compute"].startswith(("bf16: ", "fp32: "))
    rows = {row["policy"]: row for row in data["rows"]}
    assert list(rows) == ["locret", "streaming", "snapkv", "full"]
    for row in rows.values():
        assert set(row) == set(ROW_FIELDS)
        assert row["skipped"] is None and row["task"] == "needle" and row["length"] == 300
        assert 0 <= row["accuracy"] <= row["right_accuracy"] <= 1
        assert row["peak_bytes"] > 0 and row["prefill_tokens_per_s"] > 0 and row["time_to_first_token_s"] > 0
        assert 0 < row["roofline_s"] and row["flops"] > 0
        prefill, decode = row["phases"]["prefill"], row["phases"]["decode"]
        assert 0 < prefill["flops"] < row["flops"]
        assert prefill["roofline_s"] == prefill["flops"] / data["config"]["matmul_flops_per_s"]
        assert decode["roofline_s"] == decode["bytes"] / data["config"]["memory_bytes_per_s"]
        for phase in (prefill, decode):
            assert phase["seconds"] > 0 and phase["roofline_ratio"] == phase["roofline_s"] / phase["seconds"]
    evicting = {rows[p]["kv_peak_bytes"] for p in ("locret", "streaming", "snapkv")}
    assert len(evicting) == 1, "every evicting policy must hold the same cache"
    assert rows["full"]["kv_peak_bytes"] > evicting.pop()


def test_a_row_may_change_settings_and_finch_reads_with_the_questions():
    result = bench("--policies", "locret,locret:span=8:reread=1,finch", *SMALL, "--json")
    assert result.exit_code == 0, result.output
    rows = {row["policy"]: row for row in json.loads(result.stdout)["rows"]}
    assert list(rows) == ["locret", "locret:span=8:reread=1", "finch"]
    assert (rows["locret"]["settings"]["span"], rows["locret"]["settings"]["reread"]) == (1, 0)
    assert (rows["locret:span=8:reread=1"]["settings"]["span"], rows["locret:span=8:reread=1"]["settings"]["reread"]) \
        == (8, 1)
    # finch holds the question's entries too, for a moment after each chunk
    assert rows["locret"]["kv_peak_bytes"] < rows["finch"]["kv_peak_bytes"] < 1.2 * rows["locret"]["kv_peak_bytes"]
    assert rows["finch"]["accuracy"] is not None


def test_full_is_skipped_with_the_memory_it_would_need():
    result = bench("--policies", "full", *SMALL, "--memory-limit", "0.000001", "--json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["rows"]
    assert row["skipped"].startswith("would need") and row["accuracy"] is None


def test_arch_accuracy_is_null_and_the_table_says_why(tmp_path):
    result = bench("--arch", "smollm2-135m", "--policies", "streaming", *SMALL, "--csv", tmp_path / "r.csv")
    assert result.exit_code == 0, result.output
    assert "accuracy is meaningless" in " ".join(result.stdout.split())
    (row,) = list(csv.DictReader((tmp_path / "r.csv").open()))
    assert row["accuracy"] == "" and int(row["kv_peak_bytes"]) > 0
    config = json.loads((tmp_path / "r.csv.config.json").read_text())
    assert config["model"]["arch"] == "smollm2-135m" and config["accuracy_meaningful"] is False


def test_data_task_reports_exact_and_contains(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"context": "Some words. " * 100, "question": "What?", "answer": "x"}) + "\n")
    result = bench("--data", data, "--policies", "streaming", *SMALL, "--json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["rows"]
    assert row["task"] == "data" and row["questions"] == 1 and row["length"] == row["document_tokens"] > 300


def test_plot_is_written_and_nothing_is_overwritten(tmp_path):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "bench.png"
    result = bench("--policies", "streaming", *SMALL, "--plot", plot)
    assert result.exit_code == 0, result.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / "bench.png.config.json").exists()
    again = bench("--policies", "streaming", *SMALL, "--plot", plot)
    assert again.exit_code == 1 and "already exists" in again.stderr


@pytest.mark.parametrize("args, message", [
    (["--policies", "locret,fifo"], "unknown policy fifo"),
    (["--policies", "locret:spam=3"], "unknown setting(s): spam"),
    (["--policies", "locret:span"], "'span' is not SETTING=VALUE"),
    (["--model", "x", "--arch", "smollm2-135m"], "--model or --arch"),
    (["--arch", "gpt-5"], "unknown shape preset"),
    (["--arch", "smollm2-135m", "--load-4bit"], "--load-4bit and --max-memory apply to --model"),
    (["--lengths", "10"], "at least 64"),
    (["--tasks", "poems"], "unknown task poems"),
])
def test_bad_bench_input_is_one_line(args, message):
    result = bench(*args)
    assert result.exit_code == 1
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_row_sets_ints_floats_and_words():
    assert row_variant("lazyllm:lazy_share=0.5:budget=2048:positions=original") == (
        "lazyllm", {"lazy_share": 0.5, "budget": 2048, "positions": "original"})
    assert row_variant("locret:lazy-after=8") == ("locret", {"lazy_after": 8})
    with pytest.raises(SettingError, match="unknown setting"):
        row_variant("locret:lazyness=1")
