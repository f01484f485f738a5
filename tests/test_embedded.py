"""The embedded default model: loads offline from package data, answers a real question, ships in the wheel."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import zipfile

from typer.testing import CliRunner

from locret_cli.bench.generated import document_text
from locret_cli.bench.synthetic import Fact
from locret_cli.cli import app
from locret_cli.models.embedded import EMBEDDED_DIR, load_embedded

runner = CliRunner()


def test_loads_offline_with_its_recorded_defaults():
    loaded, heads = load_embedded("cpu", "auto")
    assert loaded.defaults["budget"] == 1024 and loaded.defaults["chunk_size"] == 512
    budget_reach = loaded.defaults["budget"] + loaded.defaults["chunk_size"] + 64
    assert budget_reach <= loaded.model.config.max_position_embeddings  # compact positions stay in training range
    assert heads.shape.layers == loaded.model.config.num_hidden_layers


def test_tokenizer_round_trips_text():
    loaded, _ = load_embedded("cpu", "auto")
    text = "The gate code of the north depot is 4821.\n\nÜnïcödé — and a tab\there."
    assert loaded.tokenizer.decode(loaded.tokenizer.encode(text)) == text


def test_ask_finds_a_fact_deep_in_a_document_longer_than_the_budget(tmp_path):
    loaded, _ = load_embedded("cpu", "auto")
    fact = Fact("The spare key of the Dorvel hangar is 58213.", "What is the spare key of the Dorvel hangar?",
                "58213", "attribute")
    text = document_text(loaded.tokenizer, random.Random(4), 6000, [fact], "dev")
    (tmp_path / "doc.txt").write_text(text)
    result = runner.invoke(app, ["ask", str(tmp_path / "doc.txt"), fact.question, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["document"]["tokens"] > 5000 and data["kv_cache"]["kept_tokens"] == 1024
    assert data["answer"] == "The spare key of the Dorvel hangar is 58213."  # the model answers with the sentence


def test_package_data_is_in_the_built_wheel(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(EMBEDDED_DIR.parents[2])], check=True)
    wheel = next(tmp_path.glob("locret_cli-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("model.safetensors", "config.json", "tokenizer.tiktoken", "locret.json", "heads/heads.safetensors",
                 "heads/heads.json"):
        assert f"locret_cli/models/embedded_model/{name}" in names, name
    with zipfile.ZipFile(wheel) as archive:
        recorded = {name: list(json_strings(json.loads(archive.read(name))))
                    for name in names if name.startswith("locret_cli/") and name.endswith(".json")}
    assert "locret_cli/models/embedded_model/heads/heads.json" in recorded
    machine_paths = {name: [s for s in strings if looks_like_a_machine_path(s)] for name, strings in recorded.items()}
    assert machine_paths == {name: [] for name in recorded}


def json_strings(value):
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from json_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from json_strings(item)


def looks_like_a_machine_path(text: str) -> bool:
    """An absolute POSIX or Windows path, or a home directory: provenance must name things, not locate them."""
    return bool(re.match(r"^(/|~|[A-Za-z]:[\\/])", text)) or "/home/" in text or "/root/" in text
