"""Write samples/: a long handbook as PDF and text, and the questions it answers (JSONL).

    python recipes/make_samples.py            # needs the dev extra (reportlab)

Seeded: running it again writes the same files.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.platypus import Paragraph, SimpleDocTemplate

from locret_cli.bench.synthetic import Fact, passkey_fact
from recipes.sample_documents import distinct_facts, document

SEED = 2026
PARAGRAPHS = 1300
OUT = Path(__file__).resolve().parent.parent / "samples"


def main() -> None:
    rng = random.Random(SEED)
    gate = Fact("The gate code of the north depot is 4821.", "What is the gate code of the north depot?", "4821",
                "attribute")
    others = [f for f in distinct_facts(rng, 12) if f.question != gate.question][:8]
    placed = [(gate, 0.07), (passkey_fact(rng), 0.5)] + [(f, (i + 1) / 10) for i, f in enumerate(others)]
    text = document(SEED, PARAGRAPHS, placed)
    OUT.mkdir(exist_ok=True)
    (OUT / "handbook.txt").write_text(text)
    with (OUT / "questions.jsonl").open("w") as f:
        for fact, depth in placed:
            f.write(json.dumps({"question": fact.question, "answer": fact.answer, "kind": fact.kind,
                                "depth": depth}) + "\n")
    style = getSampleStyleSheet()["BodyText"]
    story = [Paragraph(block) for block in text.split("\n\n") if block.strip()]
    SimpleDocTemplate(str(OUT / "handbook.pdf"), pagesize=A4, title="Field handbook (synthetic)",
                      author="locret samples").build([Paragraph(p.text, style) for p in story])
    print(f"wrote {OUT}: {len(text):,} characters, {len(placed)} questions")


if __name__ == "__main__":
    main()
