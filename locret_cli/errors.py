"""The exception types the library raises for things a user can fix.

The CLI turns every `LocretError` into a single line on stderr and a non-zero exit; anything else is a bug and keeps
its traceback. A `SettingError` names the settings it is about; the library writes them by name (`budget`), and the
CLI, in one place (`cli.domain_errors`), by the flag that sets them (`--budget`).
"""

from __future__ import annotations

import string
from collections.abc import Callable


class LocretError(Exception):
    """A problem with the user's input, files, model or machine, stated in one line with what to do about it."""


class SettingError(LocretError):
    """A problem with one or more named settings. `template` writes each setting as `{name}`; `values` fill the
    other fields. `str()` gives the settings' names; `render(name_of)` lets a caller name them its own way."""

    def __init__(self, template: str, **values):
        self.template, self.values = template, values
        super().__init__(self.render(lambda name: name))

    def settings(self) -> list[str]:
        """The settings the message names, in order."""
        fields = [field for _, field, _, _ in string.Formatter().parse(self.template) if field]
        return [field for field in dict.fromkeys(fields) if field not in self.values]

    def render(self, name_of: Callable[[str], str]) -> str:
        return self.template.format_map({**{name: name_of(name) for name in self.settings()}, **self.values})
