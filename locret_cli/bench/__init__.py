"""`locret bench`: accuracy, memory and speed of every eviction policy on the same documents and questions."""

from locret_cli.bench.suite import BenchConfig, BenchResult, parse_lengths, run_bench

__all__ = ["BenchConfig", "BenchResult", "parse_lengths", "run_bench"]
