"""docs/cli.md's table of reading and answering settings, made from their declarations (`settings.py`) and the
defaults recorded with the embedded model and with each model locret ships heads for.

    python -m recipes.settings_table     # rewrites the table between its markers in docs/cli.md

`tests/test_settings_schema.py` checks that the page holds the table this makes.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from locret_cli.cli.app import flag
from locret_cli.models.embedded import EMBEDDED_DIR
from locret_cli.models.shipped import DEFAULTS_FILE, HEADS_ROOT
from locret_cli.settings import AnswerSettings, ReadSettings, shown_value

PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
BEGIN = "<!-- settings table: made by python -m recipes.settings_table from settings.py -->"
END = "<!-- end of the settings table -->"
SHIPPED_NAMES = {"smollm2-135m-instruct": "SmolLM2", "gemma3-270m": "Gemma 3 270M",
                 "qwen2.5-coder-0.5b-instruct": "Qwen2.5-Coder 0.5B",
                 "qwen2.5-coder-1.5b-instruct": "Qwen2.5-Coder 1.5B"}


def recorded_defaults() -> list[tuple[str, dict]]:
    """(model name, settings recorded with it): the embedded model, then each model with shipped heads."""
    recorded = [("embedded", json.loads((EMBEDDED_DIR / DEFAULTS_FILE).read_text()))]
    for directory in sorted(HEADS_ROOT.iterdir()):
        if (directory / DEFAULTS_FILE).is_file():
            recorded.append((SHIPPED_NAMES.get(directory.name, directory.name),
                             json.loads((directory / DEFAULTS_FILE).read_text())))
    return recorded


def table() -> str:
    """The Markdown table: one row per setting, read ones first, with its flag, default and help."""
    recorded = recorded_defaults()
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for kind, applies in ((ReadSettings, "read"), (AnswerSettings, "answer")):
        for spec in fields(kind):
            names = spec.metadata["flag"] or flag(spec.name)
            others = [f"{name}: {shown_value(values[spec.name])}" for name, values in recorded
                      if spec.name in values and values[spec.name] != spec.default]
            default = shown_value(spec.default) + (f" ({', '.join(others)})" if others else "")
            rows.append(f"| `{names.replace('/', '` / `')}` | {default} | {applies}: {spec.metadata['help']} |")
    return "\n".join(rows)


def with_table(page: str) -> str:
    """`page` with the text between the markers replaced by `table()`."""
    head, _, rest = page.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main() -> None:
    PAGE.write_text(with_table(PAGE.read_text()))


if __name__ == "__main__":
    main()
