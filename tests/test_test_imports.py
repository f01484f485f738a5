"""The tests' own layout: shared helpers live in tests/helpers and fixtures in conftest.py, so no test module imports
another test module or conftest, and no helper module sits loose beside the tests."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module an import statement anywhere in `tree` names, with its line: `from a.b import c` names a.b and
    a.b.c (c may be a module)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            joint = "" if module.endswith(".") else "."
            found += [(node.lineno, module)] + [(node.lineno, module + joint + alias.name) for alias in node.names]
    return found


def forbidden_imports(source: str) -> list[str]:
    """`line: module` for each import in `source` of a test module (a `test_*` name) or of conftest."""
    return [f"{line}: {module}" for line, module in imported_modules(ast.parse(source))
            if any(part.startswith("test_") or part == "conftest" for part in module.split("."))]


def test_the_check_names_each_import_of_a_test_module_or_conftest_with_its_line():
    source = ("import torch\nfrom helpers.engines import chunks_of\nfrom test_engine import random_ids\n"
              "import tests.test_reader as reader\n\n\ndef f():\n    from conftest import tiny_model\n"
              "    from tests import test_niah\n    from . import test_spans\n")
    assert forbidden_imports(source) == ["3: test_engine", "3: test_engine.random_ids", "4: tests.test_reader",
                                         "8: conftest", "8: conftest.tiny_model", "9: tests.test_niah",
                                         "10: .test_spans"]


def test_no_test_file_imports_a_test_module_or_conftest():
    offenders = {str(path.relative_to(TESTS)): found for path in sorted(TESTS.rglob("*.py"))
                 if (found := forbidden_imports(path.read_text()))}
    assert offenders == {}


def test_every_python_file_is_a_test_module_a_conftest_or_a_helper():
    loose = [str(path.relative_to(TESTS)) for path in sorted(TESTS.rglob("*.py"))
             if not path.name.startswith("test_") and path.name != "conftest.py"
             and path.relative_to(TESTS).parts[0] != "helpers"]
    assert loose == []
