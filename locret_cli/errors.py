"""The exception types the library raises for things a user can fix.

The CLI turns every `LocretError` into a single line on stderr and a non-zero exit; anything else is a bug and keeps
its traceback. A `SettingError` names the settings it is about; the library writes them by name (`budget`), and the
CLI, in one place (`cli.domain_errors`), by the flag that sets them (`--budget`). Each type's `kind` says what kind of
problem it is, for a program that reads the error (the CLI's `--json`): a setting, an input, memory, the model, or
another.
"""

from __future__ import annotations

import string
from collections.abc import Callable


class LocretError(Exception):
    """A problem with the user's input, files, model or machine, stated in one line with what to do about it."""

    kind = "other"


class InputError(LocretError):
    """A document or other input file that cannot be used: missing, unreadable, empty, not what it claims to be."""

    kind = "input"


class ModelError(LocretError):
    """A model that cannot be loaded or driven: not found, unreadable, or of a kind locret does not support."""

    kind = "model"


class SettingError(LocretError):
    """A problem with one or more named settings. `template` writes each setting as `{name}`; `values` fill the
    other fields. `str()` gives the settings' names; `render(name_of)` lets a caller name them its own way."""

    kind = "setting"

    def __init__(self, template: str, **values):
        self.template, self.values = template, values
        super().__init__(self.render(lambda name: name))

    def settings(self) -> list[str]:
        """The settings the message names, in order."""
        fields = [field for _, field, _, _ in string.Formatter().parse(self.template) if field]
        return [field for field in dict.fromkeys(fields) if field not in self.values]

    def render(self, name_of: Callable[[str], str]) -> str:
        return self.template.format_map({**{name: name_of(name) for name in self.settings()}, **self.values})


class InsufficientMemoryError(SettingError):
    """A run estimated not to fit in free memory, naming the settings that would make it fit."""

    kind = "memory"
