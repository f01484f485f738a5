"""`locret ask` through Typer's CliRunner: stdin, --json, --quiet, and a one-line error for each bad input."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
import torch
from helpers.cli import ask
from helpers.documents import DOCUMENT
from helpers.models import save_model_dir, tiny_model
from helpers.pdfs import encrypted_pdf, image_only_pdf, text_pdf

from locret_cli.core.heads import RetainingHeads
from locret_cli.models.embedded import load_embedded
from locret_cli.models.heads_files import save_heads


@pytest.fixture
def llama_dir(tmp_path):
    return save_model_dir(tiny_model("llama"), tmp_path / "llama")


def test_json_document_has_every_key_and_nothing_else_on_stdout(doc):
    result = ask(doc, "What is the gate code of the north depot?", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) >= {"answer", "document", "budget", "chunk_size", "policy", "kv_cache", "memory", "speed"}
    embedded, _ = load_embedded("cpu")
    document = dict(data["document"])
    assert document.pop("read_s") > 0
    assert document == {"name": str(doc), "kind": "text", "tokens": len(embedded.tokenizer.encode(DOCUMENT)),
                        "pages": None, "sha256": hashlib.sha256(DOCUMENT.encode()).hexdigest(),
                        "size_bytes": len(DOCUMENT.encode())}
    assert data["question"] == "What is the gate code of the north depot?" and data["context"] == {"loaded_from": None}
    assert [set(s) for s in data["sources"]] == [{"lines", "weight", "holds_answer"}]
    assert data["sources"][0]["lines"] == [1, 1] and data["sources"][0]["holds_answer"]
    assert (data["budget"], data["chunk_size"], data["policy"]) == (1024, 512, "locret")
    assert data["score_pool"] == embedded.defaults.get("score_pool", 1)
    assert set(data["kv_cache"]) == {"holds_document", "kept_tokens", "peak_tokens", "peak_bytes",
                                     "full_cache_bytes", "lazy_pruned_tokens", "by_kind"}
    assert data["kv_cache"]["by_kind"] is None  # no sliding layers
    assert data["kv_cache"]["holds_document"] is True  # the embedded model answers from its bounded cache
    assert data["kv_cache"]["lazy_pruned_tokens"] == 0 and data["lazy_after"] == 0
    assert data["kv_cache"]["kept_tokens"] == 1024
    assert data["kv_cache"]["peak_tokens"] == 1024 + 512
    assert 0 < data["kv_cache"]["peak_bytes"] < data["kv_cache"]["full_cache_bytes"]
    assert set(data["memory"]) == {"peak_bytes", "device"} and data["memory"]["peak_bytes"] > 0
    assert set(data["speed"]) == {"read_s", "answer_s", "prefill_tokens_per_s", "decode_tokens_per_s",
                                  "time_to_first_token_s", "total_s", "compute"}
    assert data["speed"]["compute"].startswith(("bf16: ", "fp32: "))  # the measured choice, and why
    assert data["speed"]["prefill_tokens_per_s"] > 0


def test_stdin_quiet_and_json_agree(doc):
    by_file = json.loads(ask(doc, "What is the gate code of the north depot?", "--json").stdout)
    piped = ask("-", "What is the gate code of the north depot?", "--json", input=DOCUMENT.encode())
    assert piped.exit_code == 0, piped.output
    assert json.loads(piped.stdout)["answer"] == by_file["answer"]
    quiet = ask(doc, "What is the gate code of the north depot?", "-q")
    assert quiet.exit_code == 0 and quiet.stdout == by_file["answer"] + "\n"
    assert quiet.stderr == ""


def test_table_goes_to_stderr_and_answer_to_stdout(doc):
    result = ask(doc, "What is the gate code of the north depot?")
    assert result.exit_code == 0
    assert "What it cost" in result.stderr and "KV cache peak" in result.stderr
    assert "What it cost" not in result.stdout


def test_score_pool_given_on_the_command_line_is_used(doc):
    result = ask(doc, "q?", "--json", "--score-pool", 5, "--no-strict")
    assert result.exit_code == 0 and json.loads(result.stdout)["score_pool"] == 5


def test_stabilizers_that_do_not_fit_are_clipped_with_a_warning(doc):
    result = ask(doc, "q?", "--json", "--budget", 100, "--stabilizers", 100, "--no-strict")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["stabilizers"] == 50
    assert "does not fit" in result.stderr


def test_local_model_with_heads_and_baseline_policies(tmp_path, doc, llama_dir):
    save_heads(RetainingHeads.for_model(tiny_model("llama"), hidden=16), tmp_path / "heads")
    base = [doc, "q?", "--model", llama_dir, "--json", "--budget", 64, "--chunk-size", 32, "--max-new-tokens", 4]
    for extra in (["--heads", tmp_path / "heads"], ["--policy", "streaming"], ["--policy", "full"]):
        result = ask(*base, *extra)
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        prompt = 1 + len(DOCUMENT) + len("\n\nQuestion: q?\nAnswer:")  # <s>, the document's bytes, the question
        if data["policy"] == "full":  # everything stays: the prompt, plus up to 3 decode steps
            assert prompt <= data["kv_cache"]["peak_tokens"] <= prompt + 3
        else:
            assert data["kv_cache"]["peak_tokens"] == 64 + 32


def bad_inputs(tmp_path, llama_dir):
    """(arguments, stdin, expected message) for every bad input the issue lists."""
    doc = tmp_path / "ok.txt"
    doc.write_text(DOCUMENT)
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "corrupt.pdf").write_bytes(b"%PDF-1.4\nnonsense")
    plain = text_pdf(tmp_path / "plain.pdf", ["text"])
    save_heads(RetainingHeads.for_model(tiny_model("mistral"), hidden=8), tmp_path / "mistral-heads")
    gpt2_dir = tmp_path / "gpt2"
    from transformers import GPT2Config, GPT2LMHeadModel

    save_model_dir(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=300)), gpt2_dir)
    return [
        ([tmp_path / "missing.txt", "q?"], None, "no such file"),
        ([tmp_path, "q?"], None, "is a directory"),
        ([tmp_path / "empty.txt", "q?"], None, "is empty"),
        (["-", "q?"], b"", "is empty"),
        ([tmp_path / "corrupt.pdf", "q?"], None, "not a readable PDF"),
        ([encrypted_pdf(tmp_path / "locked.pdf", plain), "q?"], None, "is encrypted"),
        ([image_only_pdf(tmp_path / "scan.pdf"), "q?"], None, "no text layer"),
        ([doc, "q?", "--budget", 0], None, "--budget must be positive"),
        ([doc, "q?", "--score-pool", 4], None, "--score-pool must be a positive odd number"),
        ([doc, "q?", "--chunk-size", 0], None, "--chunk-size must be positive"),
        ([doc, "q?", "--positions", "sideways"], None, "--positions must be compact or original"),
        ([doc, "   "], None, "the question is empty"),
        ([doc, "q?", "--model", llama_dir, "--heads", tmp_path / "mistral-heads"], None, "another model shape"),
        ([doc, "q?", "--model", llama_dir], None, "needs retaining heads"),
        ([doc, "q?", "--model", llama_dir, "--heads", tmp_path / "nowhere"], None, "heads not found"),
        ([doc, "q?", "--model", gpt2_dir, "--policy", "full"], None, "'gpt2' is not supported"),
        ([doc, "q?", "--model", "no-such-org/no-such-model"], None, "cannot load model"),
        ([doc, "q?", "--policy", "psychic"], None, "--policy must be locret, streaming,"),
        ([doc, "q?", "--dtype", "fp8"], None, "unknown dtype"),
    ]


def test_each_bad_input_gets_one_line_and_a_nonzero_exit(tmp_path, llama_dir):
    for args, stdin, message in bad_inputs(tmp_path, llama_dir):
        result = ask(*args, input=stdin)
        assert result.exit_code == 1, (args, result.output)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and message in errors[0], (args, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert all(line.startswith(("error:", "warning:")) for line in lines), result.stderr
        assert result.stdout == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_asked_for_but_absent(doc):
    result = ask(doc, "q?", "--device", "cuda")
    assert result.exit_code == 1 and "sees no CUDA device" in result.stderr


def test_load_4bit_without_bitsandbytes(doc, llama_dir, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a))
    result = ask(doc, "q?", "--model", llama_dir, "--load-4bit", "--policy", "full")
    assert result.exit_code == 1 and "needs bitsandbytes" in result.stderr


def test_python_dash_m_runs_the_same_cli():
    out = subprocess.run([sys.executable, "-m", "locret_cli", "ask", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--budget" in out.stdout


def test_the_command_line_is_declared_without_torch_or_transformers():
    """Help and option errors come before the heavy imports, which only a command that runs a model makes."""
    check = "import sys, locret_cli.cli; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


@pytest.mark.parametrize("command, says", [
    (["ask", "missing.pdf", "q?"], "no such file: missing.pdf"), (["chat", "missing.pdf"], "no such file: missing.pdf"),
    (["read", "missing.pdf", "-o", "out.locret"], "no such file: missing.pdf"),
    (["batch", "missing/*.pdf", "--out", "a.jsonl"], "no file matches missing/*.pdf"),
])
def test_a_missing_document_is_refused_before_torch_is_imported(command, says, tmp_path):
    check = (f"import sys; from locret_cli.cli import main; sys.argv = ['locret', *{command!r}]\n"
             "try:\n    main()\nexcept SystemExit as stop:\n"
             "    print(stop.code, sorted({'torch', 'transformers'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert out.stdout.strip() == "1 []" and says in out.stderr, out.stderr


def test_the_embedded_model_warns_of_questions_outside_its_forms(doc, llama_dir):
    trained = ask(doc, "What is the gate code of the north depot?", "--json")
    assert trained.exit_code == 0 and "was trained only on" not in trained.stderr
    assert json.loads(trained.stdout)["warnings"] == []
    other = ask(doc, "Summarise chapter 3", "--json")
    assert other.exit_code == 4 and json.loads(other.stdout)["answer"] == "The document does not say."
    warning = 'the embedded demo model was trained only on "What is the <attribute> of <entity>?"'
    assert other.stderr.count(warning) == 1
    assert [w for w in json.loads(other.stdout)["warnings"] if w.startswith(warning)]
    real = ask(doc, "Summarise chapter 3", "--model", llama_dir, "--policy", "streaming", "--budget", 64,
               "--chunk-size", 32, "--max-new-tokens", 2, "--json")
    assert real.exit_code == 0 and "was trained only on" not in real.stderr
