"""How often the windows a locating rule picks hold a natural question's answer: no language model, only the
tokenizer, BM25 and (for the embedding rules) all-MiniLM-L6-v2.

Each document of the chosen half is tokenized alone; its 256-token passages (one every 128 tokens, as
`core/answer/passage_rank.py` cuts them) are ranked for every stated question by each rule, and windows of
`--tokens` tokens are centred on the best `--windows` of them as `best_passages` does. A question counts as held
where its answer's place (its `depth`, mapped from characters to tokens) lies inside a window, and as named where
the windows' decoded text holds its answer (or an accepted form) whole.

    bm25      the product's BM25 (`--locate bm25`)
    minilm    cosine similarity of MiniLM embeddings of the passage and the question
    rrf       reciprocal-rank fusion of the two (1/(60 + rank) summed)
    mixed     `--windows - 1` windows by BM25, then one by MiniLM (`research/locate_pairs.py`'s `mixed_passages`)

    python -m research.locate_recall --model runs/qwen1.5b/qwen2.5-coder-1.5b-instruct --split validation
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from transformers import AutoTokenizer

from locret_cli.bench import natural
from locret_cli.bench.rankers import EmbeddingRanker, minilm_embed
from locret_cli.bench.scoring import contains_match
from locret_cli.checks.grounding import words
from locret_cli.core.answer.locate import joined
from locret_cli.core.answer.passage_rank import PASSAGE_TOKENS, best_passages, bm25_scores, centred, passage_spans
from research.locate_pairs import mixed_passages

RRF_K = 60
RULES = ("bm25", "minilm", "rrf", "mixed")


def ranks(scores: list[float]) -> list[int]:
    """Each passage's rank (0: best) under `scores`, ties in document order."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    out = [0] * len(scores)
    for rank, i in enumerate(order):
        out[i] = rank
    return out


def rule_windows(rule: str, bm25: list[float], dense: list[float], spans: list[tuple[int, int]], windows: int,
                 size: int, tokens: int) -> list[tuple[int, int]]:
    """The windows `rule` chooses."""
    if rule == "mixed":
        return mixed_passages(bm25, dense, spans, windows, size, 0, tokens)
    if rule == "minilm":  # a cosine may be 0 or below, which best_passages never chooses
        return joined(centred(dense, spans, windows, size, 0, tokens, [], floor=float("-inf")))
    if rule == "rrf":
        bm25 = [1 / (RRF_K + a) + 1 / (RRF_K + b) for a, b in zip(ranks(bm25), ranks(dense))]
    return best_passages(bm25, spans, windows, size, 0, tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a folder with the tokenizer")
    parser.add_argument("--split", default="validation")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--documents", type=int, default=6)
    parser.add_argument("--rules", default=",".join(RULES), help="comma-separated; bm25 alone needs no embedder")
    args = parser.parse_args()
    rules = [r for r in args.rules.split(",") if r]
    if unknown := set(rules) - set(RULES):
        parser.error(f"unknown rules: {', '.join(sorted(unknown))} (known: {', '.join(RULES)})")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    ranker = EmbeddingRanker(minilm_embed()) if rules != ["bm25"] else None
    held, named, total = defaultdict(int), defaultdict(int), defaultdict(int)
    for document in natural.load(args.split)[:args.documents]:
        encoded = tokenizer(document.text, return_offsets_mapping=True, add_special_tokens=False)
        ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
        spans = passage_spans(len(ids), 0, min(PASSAGE_TOKENS, args.tokens // 2))
        texts = [tokenizer.decode(ids[a:b]) for a, b in spans]
        index = ranker.index(texts) if ranker else None
        passage_words = [words(t) for t in texts]
        for q in document.questions:
            if not q.answer:
                continue
            place = int(q.depth * len(document.text))
            token = next((i for i, (a, b) in enumerate(offsets) if b > place), len(ids) - 1)
            bm25 = bm25_scores(passage_words, words(q.question))
            dense = ranker.scores(index, q.question) if ranker else []
            for rule in rules:
                chosen = rule_windows(rule, bm25, dense, spans, args.windows, args.tokens, len(ids))
                text = " ".join(tokenizer.decode(ids[a:b]) for a, b in chosen)
                for key in (rule, f"{rule} {q.kind}"):
                    total[key] += 1
                    held[key] += any(a <= token < b for a, b in chosen)
                    named[key] += any(contains_match(text, form) for form in (q.answer, *q.alternatives))
        print(f"{document.name}: {len(ids)} tokens", flush=True)
    for key in sorted(total, key=lambda k: (k.split()[0] not in RULES, k)):
        print(f"{key:24s} held {held[key]:3d}/{total[key]:<3d} named {named[key]:3d}/{total[key]}")


if __name__ == "__main__":
    main()
