"""Quantities written for people, with no heavy imports, so the command line can use them before torch loads."""

from __future__ import annotations


def human_bytes(n: int | None) -> str:
    """`n` bytes for people: 512 B, 3.10 MiB, 1.50 GiB; None is "-"."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
