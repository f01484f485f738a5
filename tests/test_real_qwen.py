"""Qwen2.5-Coder-0.5B-Instruct, as `python -m recipes.qwen2_5_coder.assemble 0.5b` leaves it in runs/qwen0.5b (the
assembled GGUF file and its converted checkpoint): the shipped heads are found for it, and one bounded read of a long
document answers. Skipped, with the reason, where the recipe has not run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from locret_cli.cli import app
from locret_cli.models.shipped import HEADS_ROOT

FOLDER = Path(os.environ.get("LOCRET_QWEN_0_5B", "runs/qwen0.5b"))
CONVERTED = FOLDER / "qwen2.5-coder-0.5b-instruct"
SHIPPED = HEADS_ROOT / "qwen2.5-coder-0.5b-instruct"

pytestmark = [
    pytest.mark.skipif(not (CONVERTED / "config.json").is_file(),
                       reason=f"no converted Qwen2.5-Coder-0.5B-Instruct in {FOLDER}: python -m "
                              "recipes.qwen2_5_coder.assemble 0.5b"),
    pytest.mark.skipif(not SHIPPED.is_dir(), reason="no heads ship for Qwen2.5-Coder-0.5B-Instruct in this checkout"),
]


def test_one_bounded_read_of_a_long_document_answers(tmp_path):
    """The handbook's first 700 lines (about 35K tokens, the fact on line 185) through one bounded read."""
    part = tmp_path / "handbook.txt"
    part.write_text("".join(open("samples/handbook.txt", encoding="utf-8").readlines()[:700]))
    result = CliRunner().invoke(app, ["ask", str(part), "What is the gate code of the north depot?", "--model",
                                      str(CONVERTED), "--reread", "0", "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["route"] == "bounded-cache" and report["policy"] == "locret"
    budget = json.loads((SHIPPED / "locret.json").read_text())["budget"]
    assert report["kv_cache"]["kept_tokens"] == budget < report["document"]["tokens"]
    assert "4821" in report["answer"], report["answer"]


def test_the_natural_documents_are_20k_to_150k_tokens_for_this_model():
    from transformers import AutoTokenizer

    from locret_cli.bench import natural

    tokenizer = AutoTokenizer.from_pretrained(str(CONVERTED))
    for source in natural.DOCUMENTS:
        tokens = len(tokenizer.encode(natural.document_text(source.name)))
        assert 20_000 <= tokens <= 150_000, (source.name, tokens)
