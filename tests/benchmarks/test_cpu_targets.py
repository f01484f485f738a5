"""`benchmarks/cpu_targets.py` reads each step's output as the tools write it, and says which steps did not finish."""

from __future__ import annotations

import json

from benchmarks.cpu_targets import MISSING, bench_rows, cpu_name, decode_steps_row, finished, read_row, timed_row

FARM_BENCH = """farm-bench 3 | 2026-11-28, 2c/24GiB | AMD EPYC | not pinned
                     min      median         max   n: A 5; whole process
A user s          18.982      21.126      21.691
A wall s          10.848      11.330      11.786
A peak MiB         445.3       446.8       448.0
"""
TIME_AND_TABLE = """│ reading the document                 │        228.44 s (567 tok/s) │
\tElapsed (wall clock) time (h:mm:ss or m:ss): 3:53.74
\tMaximum resident set size (kbytes): 1320312
"""


def test_each_steps_figures_are_read_from_its_own_output(tmp_path):
    (tmp_path / "cpu.txt").write_text("Architecture: x86_64\nCPU(s):   2\nModel name:   AMD EPYC\n")
    rows = [{"length": 32768, "prefill_tokens_per_s": 823.35, "decode_tokens_per_s": 33.98,
             "phases": {"prefill": {"roofline_ratio": 0.5968}}}]
    assert cpu_name(tmp_path) == "AMD EPYC, 2 CPUs"
    assert bench_rows(json.dumps({"config": {}, "rows": rows}), "shape") == [
        ("shape, 32K", "prefill 823 tok/s (60% of the roofline), decode 34.0 tok/s")]
    assert read_row(TIME_AND_TABLE) == "228.44 s (567 tok/s) reading, 3:53.74 wall, 1.26 GiB"
    assert timed_row(FARM_BENCH) == "11.3 s median (10.8-11.8 s), 0.44 GiB"


def test_a_step_that_did_not_finish_is_not_measured(tmp_path):
    (tmp_path / "bench.out").write_text("{}")
    assert finished(tmp_path, "bench") is None
    assert bench_rows(None, "shape") == [("shape", MISSING)] and timed_row(None) == MISSING
    (tmp_path / "bench.done").touch()
    (tmp_path / "bench.err").write_text("warning\n")
    assert finished(tmp_path, "bench") == "{}" and finished(tmp_path, "bench", ("out", "err")) == "{}warning\n"
    assert bench_rows("{}", "shape") == [("shape", "? (no bench JSON)")]


def test_only_runs_the_steps_it_names(tmp_path):
    import os
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "cpu_targets.sh"
    fake = tmp_path / "fake-locret"
    fake.write_text("#!/bin/sh\necho ran \"$@\"\n")
    fake.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "LOCRET": str(fake), "ONLY": "bench-qwen0.5b", "QWEN": "absent", "QWEN15": "absent"}
    done = subprocess.run(["bash", str(script), str(out)], env=env, capture_output=True, text=True, check=True)
    assert "bench-qwen0.5b: done" in done.stdout and "bench: not in ONLY" in done.stdout
    assert sorted(p.name for p in out.glob("*.done")) == ["bench-qwen0.5b.done"]
    assert (out / "bench-qwen0.5b.out").read_text().startswith("ran bench --arch qwen2.5-0.5b")


DECODE_STEPS = """smollm2-135m, int8 linears, AMD EPYC, 2 threads; median of 4 rounds, tok/s
| budget | transformers | own step | its tokens | compiled step |
|---:|---:|---:|---|---:|
| 1,024 | 29.4 | 31.9 | the same | 46.7 |
"""


def test_the_decode_steps_row_names_each_figure_in_one_cell():
    cell = decode_steps_row(DECODE_STEPS)
    assert cell == "transformers 29.4; own step 31.9; its tokens the same; compiled step 46.7"
    assert "|" not in cell
    assert decode_steps_row(None) == MISSING and decode_steps_row("no table") == "?"
