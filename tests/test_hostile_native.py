"""A native kernel's library (here the attention kernel's) is loaded from the cache folder only when it and the folder are the user's
alone: one that another user could have planted or changed is built again in a new private folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from locret_cli.runtime import native_attention, native_build


@pytest.fixture
def builds(monkeypatch, tmp_path):
    """Run `build` with a fake compiler (it writes an empty file) and a fake loader; returns the paths loaded."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", "/usr/bin/cc")
    monkeypatch.setattr(native_build.tempfile, "mkdtemp", lambda prefix: str(tmp_path / "private"))

    def compile_(command, **_):
        Path(command[command.index("-o") + 1]).write_bytes(b"built")
        return type("Done", (), {"returncode": 0})()

    loaded = []
    monkeypatch.setattr(native_build.subprocess, "run", compile_)
    monkeypatch.setattr(native_build.ctypes, "CDLL", lambda path: loaded.append(Path(path)) or path)
    (tmp_path / "private").mkdir(mode=0o700)
    return tmp_path / "cache" / "locret" / "native", tmp_path / "private", loaded


def test_a_library_of_its_own_is_built_into_a_private_cache_folder_and_loaded_from_there(builds):
    cache, _, loaded = builds
    native_attention.build()
    native_attention.build()
    assert loaded[0] == loaded[1] and loaded[0].parent == cache and loaded[0].read_bytes() == b"built"
    assert cache.stat().st_mode & 0o777 == 0o700


def test_a_folder_others_may_write_is_not_loaded_from(builds):
    cache, private, loaded = builds
    cache.mkdir(parents=True)
    os.chmod(cache, 0o777)
    _, name = native_attention.build()
    planted = cache / f"flash_bf16-{name}.so"
    planted.write_bytes(b"planted")
    native_attention.build()
    assert [path.parent for path in loaded] == [private, private]
    assert planted.read_bytes() == b"planted"  # left as it was


def test_a_library_others_may_write_is_not_loaded(builds):
    cache, private, loaded = builds
    native_attention.build()
    os.chmod(loaded[0], 0o666)
    native_attention.build()
    assert loaded[0].parent == cache and loaded[1].parent == private and loaded[1].read_bytes() == b"built"
