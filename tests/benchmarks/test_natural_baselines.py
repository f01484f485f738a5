"""natural_baselines records each baseline's answers as reader_routes records a read's, judged on the whole document."""

from __future__ import annotations

from locret_cli.bench.tasks import Question, Sample
from locret_cli.inputs.documents import text_document


def test_each_baseline_answer_is_recorded_three_ways_and_skipped_on_a_rerun(tmp_path, monkeypatch):
    import benchmarks.natural_baselines as baselines
    from benchmarks.reader_routes import read_rows
    from locret_cli.api import load_session

    text = "The mill grinds wheat by the river. " * 80 + "The gate code of the north depot is 4821. " + \
        "The road bends east. " * 80
    place = (text.index("4821") + 2) / len(text)
    asked = [Question("What is the gate code of the north depot?", "4821", kind="lookup", depth=place),
             Question("What colour is the south depot's door?", "", kind="not-stated", depth=0.5)]
    other = Sample(text_document("Nothing here. " * 50, "other"), [Question("What is it?", "x", depth=0.5)])
    monkeypatch.setattr(baselines, "natural_samples",
                        lambda split: [other, Sample(text_document(text, "depots"), asked)])
    out = tmp_path / "rows.jsonl"
    session = load_session(device="cpu", reads_with="full")
    baselines.run(session, "natural", {"depots"}, ["passage-oracle:tokens=128"], out)
    rows = [r for r in read_rows(out) if "+" not in r["config"]]
    assert [(r["document"], r["config"], r["kind"]) for r in rows] == [
        (1, "passage-oracle:tokens=128", "lookup"), (1, "passage-oracle:tokens=128", "not-stated")]
    assert all(r["read_tokens"] <= 128 + 64 < r["tokens"] for r in rows)  # the window and the prompt, not the document
    assert all(r["refuse_answer"] in (r["answer"], "The document does not say.") for r in rows)
    assert sorted({r["config"] for r in read_rows(out)}) == [
        "passage-oracle:tokens=128", "passage-oracle:tokens=128+refuse", "passage-oracle:tokens=128+strict"]
    written = out.read_text()
    baselines.run(session, "natural", {"depots"}, ["passage-oracle:tokens=128"], out)
    assert out.read_text() == written
