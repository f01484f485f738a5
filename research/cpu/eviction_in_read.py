"""How long a real read spends evicting: each `Engine.evict` timed, in a read of the start of a document.

    python -m research.cpu.eviction_in_read samples/handbook.pdf --model smollm2 --pages 30

The first `--pages` pages' text is read with the model's recorded settings, with the eviction after each chunk timed
on its own. Prints the read's time, how many evictions it made and their mean. Run it against two versions of the
engine in turn (PYTHONPATH set to each tree, from a folder outside both) to compare them on the same text.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from pypdf import PdfReader

from locret_cli.api import load_session
from locret_cli.core.engine import Engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pdf")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--pages", type=int, default=30)
    args = parser.parse_args()
    spent = []
    evict = Engine.evict

    def timed(engine: Engine) -> None:
        started = time.perf_counter()
        evict(engine)
        spent.append(time.perf_counter() - started)

    Engine.evict = timed
    session = load_session(args.model)
    text = "\n".join(page.extract_text() or "" for page in PdfReader(args.pdf).pages[:args.pages])
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "start.txt"
        path.write_text(text)
        started = time.perf_counter()
        session.open(str(path))
        read_s = time.perf_counter() - started
    print(f"read {read_s:.1f} s; {len(spent)} evictions, {sum(spent):.2f} s, "
          f"{sum(spent) / max(len(spent), 1) * 1e3:.0f} ms each")


if __name__ == "__main__":
    main()
