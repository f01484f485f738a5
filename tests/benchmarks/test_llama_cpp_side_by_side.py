"""`benchmarks/llama_cpp_side_by_side.py` puts each row beside llama.cpp's at the same length, as ratios."""

from __future__ import annotations

from benchmarks.llama_cpp_side_by_side import table


def cell(system: str, row: str, length: int, prefill: float, decode: float) -> dict:
    return {"system": system, "row": row, "length": length, "prefill_tokens_per_s": prefill,
            "decode_tokens_per_s": decode, "peak_bytes": 2 * 2**30}


def test_each_row_is_divided_by_llama_cpps_at_its_length_and_llama_cpp_comes_first():
    lines = table([cell("locret", "locret, locret", 8192, 30.0, 5.0),
                   cell("llama.cpp", "llama.cpp, Q4_K_M weights", 8192, 60.0, 10.0),
                   cell("locret", "locret, full", 32768, 20.0, 4.0)]).splitlines()
    assert lines[2] == "| llama.cpp, Q4_K_M weights | 8,192 | 60.0 | 10.00 | 2.00 GiB | 1.00 | 1.00 |"
    assert lines[3] == "| locret, locret | 8,192 | 30.0 | 5.00 | 2.00 GiB | 0.50 | 0.50 |"
    assert lines[4] == "| locret, full | 32,768 | 20.0 | 4.00 | 2.00 GiB | - | - |"  # no llama.cpp row there
