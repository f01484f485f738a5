"""Each setting is declared once (`settings.py`): its bounds are the library's checks, its fields make the
command line's options, `--json` and batch rows carry every one, and docs/cli.md's table is made from it. Policies
come from one registry."""

from __future__ import annotations

from dataclasses import fields

import pytest
from helpers.models import tiny_model
from typer.testing import CliRunner

from locret_cli.cli import app
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies import POLICIES, make_policy
from locret_cli.errors import SettingError
from locret_cli.settings import DEFAULT_POLICY, AnswerSettings, ReadSettings, settings_json
from recipes.settings_table import PAGE, with_table

ALL = [(kind, spec) for kind in (ReadSettings, AnswerSettings) for spec in fields(kind)]


def flag(spec) -> str:
    return (spec.metadata["flag"] or "--" + spec.name.replace("_", "-")).split("/")[0]


def out_of_bounds(spec):
    """A value `spec`'s bounds refuse, or None for a setting without bounds."""
    meta = spec.metadata
    if meta["odd"]:
        return 2
    if meta["minimum"] is not None:
        return meta["minimum"] - 1
    if meta["above"] is not None:
        return meta["above"]
    if meta["choices"]:
        return "nope" if isinstance(meta["choices"][0], str) else 3
    return None


@pytest.mark.parametrize("kind, spec", [(k, s) for k, s in ALL if out_of_bounds(s) is not None],
                         ids=lambda x: getattr(x, "name", ""))
def test_each_bound_is_checked_and_names_its_setting(kind, spec):
    with pytest.raises(SettingError, match=f"^{spec.name} must be"):
        kind(**{spec.name: out_of_bounds(spec)}).checked()
    assert kind().checked() == kind()


def test_every_setting_has_help_and_is_an_option_of_each_command_that_uses_it():
    assert all(spec.metadata["help"].endswith(".") for _, spec in ALL)
    runner = CliRunner()
    for command, kinds in (("read", (ReadSettings,)), ("ask", (ReadSettings, AnswerSettings)),
                           ("chat", (ReadSettings, AnswerSettings)), ("batch", (ReadSettings, AnswerSettings))):
        shown = runner.invoke(app, [command, "--help"], env={"COLUMNS": "220"}).stdout
        for kind in kinds:
            for spec in fields(kind):
                assert flag(spec) in shown, (command, spec.name)
        for panel in ("Model", "Reading", "Input and output"):
            assert panel in shown
        assert "--max-new-tokens" not in shown if command == "read" else "Answering" in shown


def test_json_names_every_setting_once():
    both = settings_json(ReadSettings(budget=7), AnswerSettings(reread=2))
    assert list(both) == [spec.name for _, spec in ALL] and (both["budget"], both["reread"]) == (7, 2)
    assert list(settings_json(ReadSettings())) == [spec.name for spec in fields(ReadSettings)]


def test_the_docs_table_is_the_one_the_declarations_make():
    page = PAGE.read_text()
    assert with_table(page) == page, "run: python -m recipes.settings_table"
    for _, spec in ALL:
        assert f"`{flag(spec)}`" in page


def test_every_registered_policy_builds_under_its_own_name_and_the_default_is_one_of_them():
    model = tiny_model("llama")
    heads = RetainingHeads.for_model(model, hidden=8)
    for name, policy in POLICIES.items():
        built = make_policy(name, model, heads)
        assert type(built) is policy and built.name == name
    assert DEFAULT_POLICY in POLICIES and ReadSettings().policy == DEFAULT_POLICY
    with pytest.raises(SettingError, match="needs retaining heads"):
        make_policy("locret", model)
