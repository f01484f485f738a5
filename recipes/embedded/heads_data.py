"""`locret train` data from the model's own task: JSONL of prompt (document + question) and answer.

    python -m recipes.embedded.heads_data --tokenizer runs/embedded/tokenizer.tiktoken --out heads.jsonl \\
        --examples 400 --lengths 600,1900
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from locret_cli.bench.generated import document_text
from locret_cli.inputs.prompt import question_text
from locret_cli.inputs.tokenizer import TiktokenTokenizer
from recipes import prose
from recipes.embedded.qa_data import answer_text, facts_for, prose_text, word_pieces


def write_heads_data(tokenizer, path: Path, seed: int, count: int, lengths: tuple[int, int],
                     facts_per_document: tuple[int, int] = (1, 1), invented: float = 0.5,
                     paragraphs: list[str] | None = None, prose_share: float = 0.0,
                     fragmented: float = 0.0, keep: str = "value") -> None:
    """`count` training-vocabulary documents of lengths[0]..lengths[1] tokens holding facts_per_document[0]..[1]
    facts, one of them asked; a share `invented` of attribute facts with made-up attributes, as in pretraining; a
    share `prose_share` of documents with filler of real prose from `paragraphs` (training packages only), a share
    `fragmented` of those cut to runs of a 2-20 times longer text, as the cache holds prose after many evictions.

    One fact per document by default. A label marks what the record's own answer attends to, so in a document
    with several facts and one asked, the facts not asked are labelled unimportant, and heads learn to drop
    statements that another question would need; eviction cannot know which question will come. So each record
    also names a passage of every fact to keep (`locret train --keep-weight`): its value, "is 4821.", or with
    `keep="statement"` its whole statement, entity and attribute too."""
    passage = KEEP_PASSAGES[keep]
    rng = random.Random(seed + 1)
    pieces = word_pieces(tokenizer)
    with path.open("w") as f:
        for _ in range(count):
            facts = facts_for(rng, "train", rng.randint(*facts_per_document), 0.3, invented, pieces)
            length = rng.randint(*lengths)
            if prose_share and rng.random() < prose_share:  # no draw at 0: the shipped heads' data stay as they were
                keep = rng.uniform(0.05, 0.5) if fragmented and rng.random() < fragmented else 1.0
                document = prose_text(tokenizer, rng, length, facts, paragraphs, keep)
            else:
                document = document_text(tokenizer, rng, length, facts, "train")
            fact = rng.choice(facts)
            f.write(json.dumps({"prompt": document + question_text(fact.question), "answer": answer_text(fact),
                                "keep": [passage(stated) for stated in facts]}) + "\n")


def value_passage(fact) -> str:
    """The end of a fact's statement that holds its value, "is 4821.": what an answer copies, whatever its question."""
    return f"is {fact.answer}."


# What a record asks the heads to keep of each fact: the value an answer copies, or the statement a question matches.
KEEP_PASSAGES = {"value": value_passage, "statement": lambda fact: fact.statement}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--examples", type=int, default=400)
    parser.add_argument("--lengths", default="600,1900", help="min,max document tokens")
    parser.add_argument("--facts", default="1,1", help="min,max facts per document")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prose-share", type=float, default=0.0,
                        help="share of documents whose filler is real prose of the training packages (prose.py)")
    parser.add_argument("--prose-packages", type=Path, help="prose.py's `pip install --target` folder")
    parser.add_argument("--fragmented", type=float, default=0.0, help="share of prose documents cut to runs")
    parser.add_argument("--keep", choices=tuple(KEEP_PASSAGES), default="value",
                        help="what each record names as a passage to keep of every fact")
    args = parser.parse_args()
    lengths, facts = (tuple(int(x) for x in spec.split(",")) for spec in (args.lengths, args.facts))
    paragraphs = prose.paragraphs(prose.TRAIN_PACKAGES, args.prose_packages) if args.prose_share else None
    write_heads_data(TiktokenTokenizer.from_file(args.tokenizer), args.out, args.seed, args.examples, lengths, facts,
                     paragraphs=paragraphs, prose_share=args.prose_share, fragmented=args.fragmented,
                     keep=args.keep)


if __name__ == "__main__":
    main()
