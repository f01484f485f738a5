"""The one exception type the library raises for things a user can fix.

The CLI turns every `LocretError` into a single line on stderr and a non-zero exit; anything else is a bug and keeps
its traceback.
"""


class LocretError(Exception):
    """A problem with the user's input, files, model or machine, stated in one line with what to do about it."""
