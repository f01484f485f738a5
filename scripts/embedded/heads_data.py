"""`locret train` data from the model's own task: JSONL of prompt (document + question) and answer.

    python -m scripts.embedded.heads_data --tokenizer runs/embedded/tokenizer.tiktoken --out heads.jsonl \\
        --examples 400 --lengths 600,1900
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from locret_cli.prompt import question_text
from locret_cli.demo_data.qa_data import answer_text, document_text, facts_for, word_pieces
from locret_cli.tokenizer import TiktokenTokenizer


def write_heads_data(tokenizer, path: Path, seed: int, count: int, lengths: tuple[int, int],
                     facts_per_document: tuple[int, int] = (1, 1), invented: float = 0.5) -> None:
    """`count` training-vocabulary documents of lengths[0]..lengths[1] tokens holding facts_per_document[0]..[1]
    facts, one of them asked; a share `invented` of attribute facts with made-up attributes, as in pretraining.

    One fact per document by default. A label marks what the record's own answer attends to, so in a document
    with several facts and one asked, the facts not asked are labelled unimportant, and heads learn to drop
    statements that another question would need; eviction cannot know which question will come."""
    rng = random.Random(seed + 1)
    pieces = word_pieces(tokenizer)
    with path.open("w") as f:
        for _ in range(count):
            facts = facts_for(rng, "train", rng.randint(*facts_per_document), 0.3, invented, pieces)
            document = document_text(tokenizer, rng, rng.randint(*lengths), facts, "train")
            fact = rng.choice(facts)
            f.write(json.dumps({"prompt": document + question_text(fact.question), "answer": answer_text(fact)}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--examples", type=int, default=400)
    parser.add_argument("--lengths", default="600,1900", help="min,max document tokens")
    parser.add_argument("--facts", default="1,1", help="min,max facts per document")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    lengths, facts = (tuple(int(x) for x in spec.split(",")) for spec in (args.lengths, args.facts))
    write_heads_data(TiktokenTokenizer.from_file(args.tokenizer), args.out, args.seed, args.examples, lengths, facts)


if __name__ == "__main__":
    main()
