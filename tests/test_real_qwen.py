"""Qwen2.5-Coder-0.5B-Instruct and -1.5B-Instruct, as `python -m recipes.qwen2_5_coder.assemble 0.5b` (or `1.5b`)
leaves them in runs/qwen0.5b (runs/qwen1.5b): the shipped heads are found for each, and one bounded read of a long
document answers. Each size is skipped, with the reason, where its recipe has not run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from locret_cli.cli import app
from locret_cli.models.shipped import HEADS_ROOT

SIZES = ("0.5b", "1.5b")


def converted(size: str) -> Path:
    folder = Path(os.environ.get(f"LOCRET_QWEN_{size.replace('.', '_').upper()}", f"runs/qwen{size}"))
    return folder / f"qwen2.5-coder-{size}-instruct"


def shipped(size: str) -> Path:
    return HEADS_ROOT / f"qwen2.5-coder-{size}-instruct"


@pytest.fixture(params=SIZES)
def size(request) -> str:
    size = request.param
    if not (converted(size) / "config.json").is_file():
        pytest.skip(f"no converted Qwen2.5-Coder-{size.upper()}-Instruct in {converted(size).parent}: python -m "
                    f"recipes.qwen2_5_coder.assemble {size}")
    if not shipped(size).is_dir():
        pytest.skip(f"no heads ship for Qwen2.5-Coder-{size.upper()}-Instruct in this checkout")
    return size


def test_one_bounded_read_of_a_long_document_answers(size, tmp_path):
    """The handbook's first 700 lines (about 35K tokens, the fact on line 185) through one bounded read."""
    part = tmp_path / "handbook.txt"
    part.write_text("".join(open("samples/handbook.txt", encoding="utf-8").readlines()[:700]))
    result = CliRunner().invoke(app, ["ask", str(part), "What is the gate code of the north depot?", "--model",
                                      str(converted(size)), "--reread", "0", "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["route"] == "bounded-cache" and report["policy"] == "locret"
    budget = json.loads((shipped(size) / "locret.json").read_text())["budget"]
    assert report["kv_cache"]["kept_tokens"] == budget < report["document"]["tokens"]
    assert "4821" in report["answer"], report["answer"]


def test_the_natural_documents_are_20k_to_150k_tokens_for_this_model(size):
    from transformers import AutoTokenizer

    from locret_cli.bench import natural

    tokenizer = AutoTokenizer.from_pretrained(str(converted(size)))
    for source in natural.DOCUMENTS:
        tokens = len(tokenizer.encode(natural.document_text(source.name)))
        assert 20_000 <= tokens <= 150_000, (source.name, tokens)
