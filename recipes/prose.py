"""Real English prose from the documentation of installed third-party Python packages.

Paragraphs come from module, class and function docstrings, parsed with `ast` (nothing is imported), and only those
that read as prose are kept: no code, tables, doctests or parameter lists. Inline reST markup is reduced to its
text. Training and evaluation draw on disjoint package sets, so the dev documents are prose the heads never saw.

Never used: the Python standard library's docstrings and the operating system's manuals, which are kept for
held-out checks. Packages are looked up in the running environment's site-packages only.
"""

from __future__ import annotations

import ast
import re
import site
from pathlib import Path

TRAIN_PACKAGES = ("transformers", "torch", "sympy", "numpy", "scipy", "pandas", "astropy", "sqlalchemy")
# The training packages that locret's own install brings: the embedded model's prose, with nothing more to install.
MODEL_PACKAGES = ("transformers", "torch", "sympy", "numpy")
DEV_PACKAGES = ("networkx", "matplotlib", "hypothesis", "reportlab", "sklearn", "statsmodels", "django")
# The packages not installed with locret, at the versions measured (docs/smollm2.md); only parsed, never imported.
EXTRA_WHEELS = ("scipy==1.16.3", "pandas==2.3.3", "astropy==7.1.1", "sqlalchemy==2.0.44", "scikit-learn==1.7.2",
                "statsmodels==0.14.5", "django==5.2.8")

_ROLE = re.compile(r":[a-z:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")  # :func:`name` -> name
_LITERAL = re.compile(r"`{1,2}([^`]+)`{1,2}_?")
_SENTENCE_END = re.compile(r"[.!?](\s|$)")


def package_root(name: str, extra: Path | None = None) -> Path | None:
    """The package's directory in `extra` (a `pip install --target` folder) or in site-packages; None if it is not
    there. The standard library is never searched."""
    for directory in [extra, *map(Path, site.getsitepackages())]:
        if directory is not None and (directory / name / "__init__.py").is_file():
            return directory / name
    return None


def clean(paragraph: str) -> str:
    text = " ".join(line.strip() for line in paragraph.splitlines())
    text = _LITERAL.sub(r"\1", _ROLE.sub(r"\1", text))
    return re.sub(r"\s+", " ", text).strip()


def is_prose(paragraph: str) -> bool:
    """Several sentences of mostly letters, with no code, doctest, table, heading or field-list lines."""
    lines = paragraph.splitlines()
    if any(line.startswith((" ", "\t")) or line.lstrip().startswith((">>>", "...", "..", ":", "-", "*", "|", "+", "="))
           for line in lines):
        return False
    text = clean(paragraph)
    if len(text) < 150 or "::" in text or "http" in text or "_" in text:
        return False
    letters = sum(c.isalpha() or c in " ,.;'()-" for c in text)
    return letters / len(text) > 0.9 and len(_SENTENCE_END.findall(text)) >= 2 and text[0].isupper()


def docstring_paragraphs(root: Path) -> list[str]:
    """Every prose paragraph in the docstrings under `root`, in file order, duplicates dropped."""
    seen: set[str] = set()
    found = []
    for path in sorted(root.rglob("*.py")):
        if "test" in path.name or "tests" in path.parts:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node)
            for paragraph in (doc or "").split("\n\n"):
                if is_prose(paragraph) and (text := clean(paragraph)) not in seen:
                    seen.add(text)
                    found.append(text)
    return found


def paragraphs(packages: tuple[str, ...], extra: Path | None = None) -> list[str]:
    """Prose paragraphs from each package of `packages`; a package that is not installed is an error."""
    out: list[str] = []
    for name in packages:
        root = package_root(name, extra)
        if root is None:
            raise SystemExit(f"package {name} not found: pip install --no-deps --target DIR {' '.join(EXTRA_WHEELS)}")
        out.extend(docstring_paragraphs(root))
    return out
