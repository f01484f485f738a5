"""Peak RSS of extracting a large PDF's text through locret's reader, in a fresh process per measurement.

    python benchmarks/pdf_memory.py --pages 2500 --out /tmp/big.pdf

Writes a PDF of `--pages` pages (about 40 lines of text each, made with reportlab) unless `--out` already holds
one, then, in a child process, opens it with `locret_cli.inputs.documents.open_document`, reads every segment, and reports
the child's peak RSS next to the file's size and the baseline RSS of a child that only imports locret.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

LINE = "Line {line} of page {page}: the ledger notes another crate of lamps moved to the north depot at dawn."


def write_pdf(path: Path, pages: int) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    pdf = canvas.Canvas(str(path), pagesize=A4)
    for page in range(1, pages + 1):
        for line in range(40):
            pdf.drawString(40, 800 - 19 * line, LINE.format(line=line + 1, page=page))
        pdf.showPage()
    pdf.save()


def high_water_mark() -> int:
    """This process's peak RSS in bytes. VmHWM starts afresh at exec; ru_maxrss may carry the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(path: str | None) -> None:
    from locret_cli.inputs.documents import open_document

    started, characters, pages = time.perf_counter(), 0, 0
    if path:
        for segment in open_document(path).segments():
            characters += len(segment.text)
            pages = segment.page
    peak = high_water_mark()
    print(json.dumps({"peak_rss_bytes": peak, "pages": pages, "characters": characters,
                      "seconds": time.perf_counter() - started}))


def measure(path: Path | None) -> dict:
    args = [sys.executable, __file__, "--child"] + ([str(path)] if path else [])
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2500)
    parser.add_argument("--out", type=Path, help="the PDF to write, or to reuse if it exists")
    parser.add_argument("--child", nargs="?", const="", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child or None)
        return
    if args.out is None:
        parser.error("--out is required")
    if not args.out.exists():
        write_pdf(args.out, args.pages)
    baseline, extracted = measure(None), measure(args.out)
    mib = 1 << 20
    print(f"file: {args.out.stat().st_size / mib:.1f} MiB, {extracted['pages']} pages, "
          f"{extracted['characters']:,} characters in {extracted['seconds']:.1f} s")
    print(f"peak RSS: {extracted['peak_rss_bytes'] / mib:.0f} MiB "
          f"(import only: {baseline['peak_rss_bytes'] / mib:.0f} MiB; "
          f"extraction added {(extracted['peak_rss_bytes'] - baseline['peak_rss_bytes']) / mib:.0f} MiB)")


if __name__ == "__main__":
    main()
