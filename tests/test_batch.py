"""`locret batch` pieces in this process: inputs, the answer log, resuming, and the work unit on the embedded model
with good and bad documents."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest
from helpers.batch import QUESTIONS, fact_document, questions_file
from helpers.pdfs import encrypted_pdf, image_only_pdf, text_pdf

from locret_cli.batch.answer_log import AnswerLog, row_key
from locret_cli.batch.inputs import expand_inputs
from locret_cli.batch.scheduler import input_order, pending, run_batch
from locret_cli.batch.work import DocumentWorker, WorkerSpec, error_rows
from locret_cli.errors import LocretError
from locret_cli.models.spec import ModelSpec

RUN = WorkerSpec().identity()


def test_a_glob_a_directory_and_a_corpus_name_the_same_documents(tmp_path):
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.txt").write_text("alpha")
    (docs / "sub" / "b.md").write_text("beta")
    (docs / "image.png").write_bytes(b"\x89PNG")
    (docs / ".hidden.txt").write_text("hidden")
    questions = questions_file(tmp_path)
    by_glob = expand_inputs(str(docs / "**" / "*.*t*"), questions)
    by_dir = expand_inputs(str(docs), questions)
    assert [j.source for j in by_glob] == [str(docs / "a.txt")]
    assert [j.source for j in by_dir] == [str(docs / "a.txt"), str(docs / "sub" / "b.md")]
    assert all(j.questions == QUESTIONS and len(j.sha256) == 64 for j in by_dir)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"source": "docs/sub/b.md", "questions": ["Own?"]}) + "\n\n"
                      + json.dumps({"source": "docs/missing.txt"}) + "\n")
    jobs = expand_inputs(str(corpus), questions)
    assert [j.questions for j in jobs] == [["Own?"] + QUESTIONS, QUESTIONS]
    assert jobs[0].sha256 == by_dir[1].sha256 and jobs[1].error.startswith("no such file")


def test_the_same_bytes_twice_are_read_once_and_our_own_files_are_not_inputs(tmp_path):
    (tmp_path / "one.txt").write_text("same")
    (tmp_path / "two.txt").write_text("same")
    (tmp_path / "out.jsonl").write_text("")
    jobs = expand_inputs(str(tmp_path / "*"), questions_file(tmp_path), exclude=(str(tmp_path / "out.jsonl"),))
    assert [(j.source, j.same_as) for j in jobs] == [(str(tmp_path / "one.txt"), [str(tmp_path / "two.txt")])]


@pytest.mark.parametrize("lines, message", [
    (["{not json"], "line 1 is not valid JSON"),
    (['{"questions": ["Q?"]}'], 'line 1 has no "source" path'),
    (['{"source": "a.txt", "questions": "Q?"}'], '"questions" must be a list'),
    (['{"source": "a.txt"}'], "^give questions FILE"),
    ([], "lists no documents"),
])
def test_a_bad_corpus_is_refused_in_one_line(tmp_path, lines, message):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(lines))
    with pytest.raises(LocretError, match=message):
        expand_inputs(str(corpus))


def test_nothing_to_read_is_refused(tmp_path):
    with pytest.raises(LocretError, match="no file matches"):
        expand_inputs(str(tmp_path / "*.pdf"), questions_file(tmp_path))
    (tmp_path / "empty").mkdir()
    with pytest.raises(LocretError, match="holds no documents"):
        expand_inputs(str(tmp_path / "empty"), None)


def rows_for(job, answer="x", spec=WorkerSpec()):
    rows = error_rows(job, spec, None, "test")
    for row in rows:
        row["answer"] = answer
    return rows


def test_the_log_skips_what_it_holds_and_drops_a_torn_last_row(tmp_path):
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "b.txt").write_text("beta")
    jobs = expand_inputs(str(tmp_path / "*.txt"), questions_file(tmp_path))
    out = tmp_path / "out.jsonl"
    with AnswerLog.open(out, RUN) as log:
        log.append(rows_for(jobs[1]))
    with out.open("a") as f:
        f.write('{"key": "cut sho')
    with AnswerLog.open(out, RUN) as log:
        assert log.torn_bytes == len('{"key": "cut sho') and out.read_text().endswith("}\n")
        todo, skipped = pending(jobs, log)
        assert [j.source for j in todo] == [jobs[0].source] and skipped == 2
        log.append(rows_for(jobs[0]))
        log.sort(input_order(jobs))
    keys = [json.loads(line)["key"] for line in out.read_text().splitlines()]
    assert keys == [row_key(j.document_id, q) for j in jobs for q in QUESTIONS]


def test_the_log_refuses_other_options_and_files_that_are_not_logs(tmp_path):
    (tmp_path / "a.txt").write_text("alpha")
    jobs = expand_inputs(str(tmp_path / "a.txt"), questions_file(tmp_path))
    out = tmp_path / "out.jsonl"
    with AnswerLog.open(out, RUN) as log:
        log.append(rows_for(jobs[0]))
    other = WorkerSpec(settings={"budget": 500}).identity()
    with pytest.raises(LocretError, match="other options \\(budget the default, not 500\\)"):
        AnswerLog.open(out, other)
    (tmp_path / "notes.jsonl").write_text('{"hello": 1}\n')
    with pytest.raises(LocretError, match="line 1 is not a locret batch row"):
        AnswerLog.open(tmp_path / "notes.jsonl", RUN)
    with pytest.raises(LocretError, match="must end in .jsonl"):
        AnswerLog.open(tmp_path / "a.txt", RUN)


def test_retry_failed_removes_error_rows_so_their_questions_are_asked_again(tmp_path):
    (tmp_path / "a.txt").write_text("alpha")
    jobs = expand_inputs(str(tmp_path / "a.txt"), questions_file(tmp_path))
    out = tmp_path / "out.jsonl"
    with AnswerLog.open(out, RUN) as log:
        log.append(rows_for(jobs[0])[:1] + error_rows(jobs[0], WorkerSpec(), "boom", None, QUESTIONS[1:]))
    with AnswerLog.open(out, RUN) as log:
        assert pending(jobs, log)[1] == 2
    with AnswerLog.open(out, RUN, retry_failed=True) as log:
        todo, skipped = pending(jobs, log)
        assert skipped == 1 and todo[0].questions == QUESTIONS[1:]
    assert len(out.read_text().splitlines()) == 1


@pytest.fixture(scope="module")
def worker():
    return DocumentWorker(WorkerSpec(ModelSpec(device="cpu"), threads=2))


class InlinePool:
    """The work unit in this process, no workers: what the pools do, without their processes."""

    name, workers = "inline", 1

    def __init__(self, worker):
        self.worker, self.spec = worker, worker.spec

    def run(self, jobs, on_result, on_tokens, on_retry):
        for job in jobs:
            on_result(job, self.worker.answer(job, on_tokens=lambda n, job=job: on_tokens(job, n)))


def test_a_batch_answers_good_documents_and_turns_bad_ones_into_error_rows(worker, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    facts = [fact_document(docs / f"good{i}.txt", seed=i) for i in range(2)]
    (docs / "bad-corrupt.pdf").write_bytes(b"%PDF-1.7\nthis is not really a pdf\n")
    encrypted_pdf(docs / "bad-encrypted.pdf", text_pdf(tmp_path / "plain.pdf", ["secret"]))
    image_only_pdf(docs / "bad-scan.pdf")
    (docs / "bad-empty.txt").write_text(" \n")
    (docs / "bad-binary.txt").write_bytes(b"\x00\x01\x02" * 500)
    jobs = expand_inputs(str(docs), questions_file(tmp_path))
    out = tmp_path / "out.jsonl"
    with AnswerLog.open(out, worker.spec.identity()) as log:
        summary = run_batch(jobs, log, InlinePool(worker))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert (summary.documents, summary.answered, summary.failed, summary.skipped) == (7, 4, 10, 0)
    errors = {row["source"].rsplit("/", 1)[1]: row["error"] for row in rows if row["error"]}
    assert errors == {"bad-binary.txt": errors["bad-binary.txt"], "bad-corrupt.pdf": errors["bad-corrupt.pdf"],
                      "bad-empty.txt": errors["bad-empty.txt"], "bad-encrypted.pdf": errors["bad-encrypted.pdf"],
                      "bad-scan.pdf": errors["bad-scan.pdf"]}
    assert "is encrypted" in errors["bad-encrypted.pdf"] and "no text layer" in errors["bad-scan.pdf"]
    assert "is empty" in errors["bad-empty.txt"] and "not a readable PDF" in errors["bad-corrupt.pdf"]
    answers = {(row["source"].rsplit("/", 1)[1], row["question"]): row["answer"] for row in rows if not row["error"]}
    for i, (gate, key) in enumerate(facts):
        assert answers[(f"good{i}.txt", QUESTIONS[0])] == f"The gate code of the north depot is {gate}."
        assert answers[(f"good{i}.txt", QUESTIONS[1])] == f"The pass key is {key}."
    good = [row for row in rows if not row["error"]]
    assert all(row["sources"] and row["run"] == worker.spec.identity() and row["settings"]["budget"] for row in good)
    assert [row["grounding"]["status"] for row in good] == ["found"] * 4 and summary.ungrounded == 0
    assert summary.tokens_read == sum({row["source"]: row["tokens"] for row in good}.values()) > 0
    with AnswerLog.open(out, worker.spec.identity()) as log:
        again = run_batch(jobs, log, InlinePool(worker))
    assert (again.documents, again.skipped) == (0, 14) and len(out.read_text().splitlines()) == 14


def test_an_answer_the_document_does_not_hold_is_withheld_and_counted(worker, tmp_path):
    gate, _ = fact_document(tmp_path / "doc.txt", seed=3)
    questions = tmp_path / "questions.txt"
    questions.write_text(f"{QUESTIONS[0]}\nWhat is the gate code of the Ardent quarry?\n")
    out = tmp_path / "out.jsonl"
    with AnswerLog.open(out, worker.spec.identity()) as log:
        summary = run_batch(expand_inputs(str(tmp_path / "doc.txt"), str(questions)), log, InlinePool(worker))
    known, absent = [json.loads(line) for line in out.read_text().splitlines()]
    assert known["answer"] == f"The gate code of the north depot is {gate}." and known["grounding"]["withheld"] is None
    assert absent["answer"] == "The document does not say." and absent["grounding"]["withheld"]
    assert (summary.answered, summary.ungrounded) == (2, 1)


def test_saved_contexts_are_written_once_and_loaded_on_the_next_run(tmp_path):
    gate, _ = fact_document(tmp_path / "doc.txt", seed=5)
    contexts = tmp_path / "contexts"
    contexts.mkdir()
    saving = DocumentWorker(WorkerSpec(ModelSpec(device="cpu"), save_contexts=str(contexts), threads=2))
    [job] = expand_inputs(str(tmp_path / "doc.txt"), questions_file(tmp_path))
    first = saving.answer(job)
    [saved] = contexts.iterdir()
    assert saved.name == f"doc-{job.sha256[:12]}.locret" and first.tokens_read > 0
    second = saving.answer(job)
    assert second.tokens_read == 0 and second.rows[0]["timings"]["loaded_from"] == str(saved)
    assert [r["answer"] for r in second.rows] == [r["answer"] for r in first.rows]
    assert first.rows[0]["answer"] == f"The gate code of the north depot is {gate}."


def test_answers_from_windows_leave_the_bounded_read_unrun_and_uncounted(tmp_path):
    gate, _ = fact_document(tmp_path / "doc.txt", seed=7)
    settings = {"reread": 1, "locate": "words", "strict": False, "max_new_tokens": 16}
    worker = DocumentWorker(WorkerSpec(ModelSpec(device="cpu"), settings=settings, threads=2))
    [job] = expand_inputs(str(tmp_path / "doc.txt"), questions_file(tmp_path))
    heard = []
    located = worker.answer(replace(job, questions=[QUESTIONS[0]]), on_tokens=heard.append)
    assert located.tokens_read == 0 and heard == [] and located.rows[0]["error"] is None
    assert located.rows[0]["answer"] == f"The gate code of the north depot is {gate}."
    unlocated = worker.answer(replace(job, questions=["Zyxq vwkj?"]), on_tokens=heard.append)  # no word in it
    tokens = unlocated.rows[0]["tokens"]
    assert unlocated.tokens_read == tokens > 0 and sum(heard) >= tokens  # the prompt's head is read too


def test_ray_without_the_extra_says_how_to_install_it(monkeypatch):
    from locret_cli.batch.ray_pool import RayPool

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(LocretError, match=r"^ray needs Ray: pip install 'locret-cli\[ray\]'"):
        RayPool("auto", WorkerSpec())


def test_two_runs_cannot_write_one_log(tmp_path):
    with AnswerLog.open(tmp_path / "out.jsonl", RUN):
        with pytest.raises(LocretError, match="another locret batch is writing"):
            AnswerLog.open(tmp_path / "out.jsonl", RUN)
    AnswerLog.open(tmp_path / "out.jsonl", RUN).close()  # free again once the first has closed it


def test_the_cli_refuses_bad_batches_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from locret_cli.cli import app

    (tmp_path / "a.txt").write_text("alpha")
    questions = questions_file(tmp_path)
    [job] = expand_inputs(str(tmp_path / "a.txt"), questions)
    spec = WorkerSpec(settings={"budget": 1024, "temperature": 0.0, "top_p": 1.0, "seed": 0})  # as the CLI's
    with AnswerLog.open(tmp_path / "done.jsonl", spec.identity()) as log:
        log.append(rows_for(job, spec=spec))
    cases = [
        (["batch", str(tmp_path / "*.pdf"), "--questions", questions, "--out", "x.jsonl"], "no file matches"),
        (["batch", str(tmp_path / "a.txt"), "--questions", questions, "--out", str(tmp_path / "x.csv")],
         "--out must end in .jsonl"),
        (["batch", str(tmp_path / "a.txt"), "--questions", questions, "--out", str(tmp_path / "done.jsonl"),
          "--budget", "2000"], "holds answers made with other options (budget 1024, not 2000)"),
        (["batch", str(tmp_path / "a.txt"), "--out", str(tmp_path / "y.jsonl")], "give --questions FILE"),
        (["batch", str(tmp_path / "a.txt"), "--questions", questions, "--out", str(tmp_path / "y.jsonl"),
          "--save-contexts", str(tmp_path / "nowhere")], "is not a directory"),
    ]
    for args, message in cases:
        result = CliRunner().invoke(app, args)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 1 and len(lines) == 1 and message in lines[0], (args, result.output)
