"""SmolLM2-135M-Instruct in each format locret loads: memory, load time, prefill and decode speed, and answers.

    python benchmarks/real_model_formats.py --prose-packages runs/prose-packages --work runs/formats \
        [--formats "safetensors, bf16" "GGUF Q4_1, int8"]

Formats: the 4-bit GGUF file (`--model smollm2`) in bf16 and fp32 and with int8 linear weights (`--load-8bit`), and
the same weights saved as a safetensors directory (what the Hub holds), loaded in bf16, in 4-bit nf4 (`--load-4bit`,
bitsandbytes on the CPU), and with most of them left on disk (`--max-memory`) at chunks of 1,024 and 4,096. Each runs
in a fresh process, so its peak RSS is its own; it reads the first 32K-token dev document with the shipped heads and
answers its questions (`benchmarks/smollm2/evaluate.py`). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SAFETENSORS = "{work}/smollm2-safetensors"
FORMATS = {  # name: (model, dtype, how it loads, read settings other than the recorded ones)
    "GGUF Q4_1, bf16": ("smollm2", "bf16", {}, {}),
    "GGUF Q4_1, fp32": ("smollm2", "fp32", {}, {}),
    "GGUF Q4_1, int8": ("smollm2", "bf16", {"load_8bit": True}, {}),
    "safetensors, bf16": (SAFETENSORS, "bf16", {}, {}),
    "safetensors, nf4": (SAFETENSORS, "bf16", {"load_4bit": True}, {}),
    "safetensors, bf16, chunk 4,096": (SAFETENSORS, "bf16", {}, {"chunk_size": 4096}),
    "safetensors, bf16, --max-memory 128MiB": (SAFETENSORS, "bf16", {"max_memory": "128MiB"}, {}),
    "safetensors, bf16, --max-memory 128MiB, chunk 4,096": (SAFETENSORS, "bf16", {"max_memory": "128MiB"},
                                                             {"chunk_size": 4096}),
}


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(model: str, dtype: str, loading: dict, reading_settings: dict, prose_packages: Path | None) -> dict:
    from benchmarks.smollm2.evaluate import dev_documents
    from locret_cli.api import load_session
    from locret_cli.bench.scoring import contains_match
    from recipes import prose

    started = time.perf_counter()
    session = load_session(model, device="cpu", dtype=dtype, **loading)
    load_s, loaded_rss = time.perf_counter() - started, rss_mib()
    load_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    weights = sum(p.numel() * p.element_size() for p in session.loaded.model.parameters()) / 2**20
    document = dev_documents(prose.paragraphs(prose.DEV_PACKAGES, prose_packages), 32000)[0]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(document.text)
    reading = session.read(f.name, session.plan(read={**reading_settings}).read)
    results = [reading.ask(fact.question, session.plan(answer={"max_new_tokens": 32}).answer) for fact in document.facts]
    os.unlink(f.name)
    right = sum(contains_match(r.answer, fact.answer) for r, fact in zip(results, document.facts))
    return {"load_s": load_s, "rss_after_load_mib": loaded_rss, "peak_rss_load_mib": load_peak,
            "parameter_mib": weights, "tokens": reading.document.tokens,
            "read_tok_s": reading.document.tokens / reading.read_s,
            "decode_tok_s": sum(r.speed.decode_tokens_per_s or 0 for r in results) / len(results),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "right": right, "questions": len(results), "weight_type": type(
                session.loaded.model.model.layers[0].self_attn.q_proj).__name__,
            "held_mib": sum(p.numel() * p.element_size() for p in session.loaded.model.parameters()
                            if p.device.type != "meta") / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prose-packages", type=Path)
    parser.add_argument("--work", type=Path, default=Path("runs/formats"))
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS), help="the rows to measure")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process: the format to measure
    args = parser.parse_args()
    if args.one:
        model, dtype, loading, reading_settings = FORMATS[args.one]
        print(json.dumps(measure(model.format(work=args.work), dtype, loading, reading_settings, args.prose_packages)))
        return
    directory = args.work / "smollm2-safetensors"
    if not directory.exists():
        from locret_cli.models.gguf import save_dequantized
        from locret_cli.models.loading import load_model

        loaded = load_model("smollm2", device="cpu", dtype="bf16")
        save_dequantized(loaded.model, loaded.tokenizer, directory)
    print("| format | weights in memory | parameters (in memory) | load | RSS after load | peak RSS | read tok/s "
          "| decode tok/s | answers |\n|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.formats:
        command = [sys.executable, __file__, "--one", name, "--work", str(args.work)]
        if args.prose_packages:
            command += ["--prose-packages", str(args.prose_packages)]
        out = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": "."})
        if out.returncode != 0:
            print(f"| {name} | failed: {out.stderr.strip().splitlines()[-1]} |")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        held = "" if round(r["held_mib"]) == round(r["parameter_mib"]) else f" ({r['held_mib']:,.0f} MiB)"
        print(f"| {name} | {r['weight_type']} | {r['parameter_mib']:,.0f} MiB{held} | {r['load_s']:.1f} s "
              f"| {r['rss_after_load_mib']:,.0f} MiB | {r['peak_rss_mib']:,.0f} MiB | {r['read_tok_s']:,.0f} "
              f"| {r['decode_tok_s']:.1f} | {r['right']}/{r['questions']} |", flush=True)


if __name__ == "__main__":
    main()
