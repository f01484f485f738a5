"""The table of what `benchmarks/cpu_targets.sh OUT_DIR` measured, for docs/measurements/cpus.md's speed targets.

    python -m benchmarks.cpu_targets OUT_DIR

Reads each step's output in OUT_DIR and prints one markdown row per figure, with the CPU's model name from
OUT_DIR/cpu.txt; a step that did not finish prints as "not measured".
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

MISSING = "not measured"


def cpu_name(out: Path) -> str:
    """The CPU's model name and core count, as `lscpu` gave them."""
    text = (out / "cpu.txt").read_text() if (out / "cpu.txt").exists() else ""
    name = re.search(r"^Model name:\s*(.+)$", text, re.MULTILINE)
    cores = re.search(r"^CPU\(s\):\s*(\d+)$", text, re.MULTILINE)
    return f"{name.group(1).strip() if name else 'an unnamed CPU'}, {cores.group(1) if cores else '?'} CPUs"


def finished(out: Path, name: str, streams: tuple[str, ...] = ("out",)) -> str | None:
    """What the step wrote to `streams` ("out", "err"), if it finished."""
    if not (out / f"{name}.done").exists():
        return None
    return "".join((out / f"{name}.{stream}").read_text() for stream in streams)


def bench_rows(text: str | None, label: str) -> list[tuple[str, str]]:
    if text is None:
        return [(label, MISSING)]
    try:
        rows = json.loads(text)["rows"]
    except (ValueError, KeyError):
        return [(label, "? (no bench JSON)")]
    return [(f"{label}, {row['length'] // 1024}K",
             (f"prefill {row['prefill_tokens_per_s']:,.0f} tok/s ({row['phases']['prefill']['roofline_ratio']:.0%} "
              f"of the roofline), decode {row['decode_tokens_per_s']:.1f} tok/s")) for row in rows]


def read_row(text: str | None) -> str:
    if text is None:
        return MISSING
    reading = re.search(r"reading the document\s*│\s*([\d.,]+ s \([\d,]+ tok/s\))", text)
    wall = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", text)
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    memory = f"{int(peak.group(1)) / 2**20:.2f} GiB" if peak else "? GiB"
    return f"{reading.group(1) if reading else '?'} reading, {wall.group(1) if wall else '?'} wall, {memory}"


def timed_row(text: str | None) -> str:
    """farm-bench's median wall time, its range and the peak memory."""
    if text is None:
        return MISSING
    wall = re.search(r"^A wall s\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", text, re.MULTILINE)
    peak = re.search(r"^A peak MiB\s+[\d.]+\s+([\d.]+)", text, re.MULTILINE)
    if not wall:
        return "?"
    memory = f"{float(peak.group(1)) / 1024:.2f} GiB" if peak else "? GiB"
    low, median, high = (float(wall.group(i)) for i in (1, 2, 3))
    return f"{median:.1f} s median ({low:.1f}-{high:.1f} s), {memory}"


def decode_steps_row(text: str | None) -> str:
    """`decode_step.py`'s last row at budget 1,024 as "column value" pairs, in one cell (its pipes would split the
    table's row)."""
    if text is None:
        return MISSING
    lines = text.splitlines()
    header = next((line for line in lines if line.startswith("| budget")), None)
    rows = [line for line in lines if line.startswith("| 1,024")]
    if header is None or not rows:
        return "?"
    names = [cell.strip() for cell in header.strip("|").split("|")][1:]
    values = [cell.strip() for cell in rows[-1].strip("|").split("|")][1:]
    return "; ".join(f"{name} {value}" for name, value in zip(names, values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    out = parser.parse_args().out
    rows = [*bench_rows(finished(out, "bench"), "SmolLM2 shape, budget 1,024, chunk 512"),
            *bench_rows(finished(out, "bench-int8"), "the same, int8 weights, the step compiled whole"),
            ("decode in steady state, int8 (`decode_step.py`)", decode_steps_row(finished(out, "decode-steps"))),
            ("SmolLM2's 128K read of the handbook", read_row(finished(out, "read", ("out", "err")))),
            ("the embedded Quick start", timed_row(finished(out, "quick-start"))),
            ("the same question, `--model smollm2`", timed_row(finished(out, "quick-start-smollm2"))),
            *bench_rows(finished(out, "bench-qwen0.5b"), "Qwen2.5 0.5B shape, budget 4,096, chunk 1,024"),
            *bench_rows(finished(out, "bench-qwen1.5b"), "Qwen2.5 1.5B shape, budget 4,096, chunk 1,024"),
            ("Qwen2.5-Coder-0.5B's 128K read of the handbook", read_row(finished(out, "read-qwen0.5b", ("out", "err")))),
            ("Qwen2.5-Coder-1.5B's 128K read of the handbook", read_row(finished(out, "read-qwen1.5b", ("out", "err"))))]
    print(f"{cpu_name(out)}\n\n| what | measured |\n|---|---|")
    for what, measured in rows:
        print(f"| {what} | {measured} |")


if __name__ == "__main__":
    main()
