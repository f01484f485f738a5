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
    hyde      BM25 for the question's words and those of the model's closed-book answer to it (a hypothetical
              answer, as HyDE uses one), read from `--hypotheses`: rows of `benchmarks.natural_closed_book`
    bm25+hyde `--windows - 1` windows by the question's BM25, then one by `hyde`'s
    hyde-minilm     MiniLM's cosine of each passage and the question followed by its hypothetical answer
    bm25+hyde-minilm  `--windows - 1` windows by BM25, then one by `hyde-minilm`'s

    python -m research.locate_recall --model runs/qwen1.5b/qwen2.5-coder-1.5b-instruct --split validation
    python -m benchmarks.natural_closed_book --model M --split validation --out runs/natural/closed-val.jsonl
    python -m research.locate_recall --model M --rules bm25,hyde,bm25+hyde --hypotheses runs/natural/closed-val.jsonl
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from transformers import AutoTokenizer

from benchmarks.natural_closed_book import read_rows
from locret_cli.bench import natural
from locret_cli.bench.rankers import EmbeddingRanker, minilm_embed
from locret_cli.bench.scoring import contains_match
from locret_cli.checks.grounding import words
from locret_cli.core.answer.locate import joined
from locret_cli.core.answer.passage_rank import PASSAGE_TOKENS, best_passages, bm25_scores, centred, passage_spans
from research.locate_pairs import mixed_passages

RRF_K = 60
ONE_SCORE = {"bm25": "bm25", "minilm": "dense", "hyde": "hyde", "hyde-minilm": "hyde-dense"}  # rule: the scores
THIRD = {"mixed": "dense", "bm25+hyde": "hyde", "bm25+hyde-minilm": "hyde-dense"}  # BM25's N-1, then these scores'
RULES = (*ONE_SCORE, "rrf", *THIRD)


def needed(rule: str) -> set[str]:
    """The kinds of score `rule` reads: "bm25" and "dense" (MiniLM) for the question, "hyde" and "hyde-dense" for
    the question followed by its hypothetical answer."""
    return {"bm25", "dense"} if rule == "rrf" else {ONE_SCORE[rule]} if rule in ONE_SCORE else {"bm25", THIRD[rule]}


def ranks(scores: list[float]) -> list[int]:
    """Each passage's rank (0: best) under `scores`, ties in document order."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    out = [0] * len(scores)
    for rank, i in enumerate(order):
        out[i] = rank
    return out


def hypotheses(path: Path | None) -> dict[tuple[str, str], str]:
    """Each (document, question)'s closed-book answer in `benchmarks.natural_closed_book`'s rows at `path`."""
    return {(r["document"], r["question"]): r["answer"] for r in read_rows(path)} if path else {}


def rule_windows(rule: str, scores: dict[str, list[float]], spans: list[tuple[int, int]], windows: int,
                 size: int, tokens: int) -> list[tuple[int, int]]:
    """The windows `rule` chooses, from each passage's `scores` of the kinds `needed(rule)` names."""
    if rule in THIRD:
        return mixed_passages(scores["bm25"], scores[THIRD[rule]], spans, windows, size, 0, tokens)
    if rule == "rrf":
        fused = [1 / (RRF_K + a) + 1 / (RRF_K + b) for a, b in zip(ranks(scores["bm25"]), ranks(scores["dense"]))]
        return best_passages(fused, spans, windows, size, 0, tokens)
    kind = ONE_SCORE[rule]
    if kind.endswith("dense"):  # a cosine may be 0 or below, which best_passages never chooses
        return joined(centred(scores[kind], spans, windows, size, 0, tokens, [], floor=float("-inf")))
    return best_passages(scores[kind], spans, windows, size, 0, tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a folder with the tokenizer")
    parser.add_argument("--split", default="validation")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--documents", type=int, default=6)
    parser.add_argument("--rules", default="bm25,minilm,rrf,mixed",
                        help=f"comma-separated of {', '.join(RULES)}; bm25, hyde and bm25+hyde need no embedder")
    parser.add_argument("--hypotheses", type=Path, help="closed-book rows (`benchmarks.natural_closed_book`)")
    args = parser.parse_args()
    rules = [r for r in args.rules.split(",") if r]
    if unknown := set(rules) - set(RULES):
        parser.error(f"unknown rules: {', '.join(sorted(unknown))} (known: {', '.join(RULES)})")
    kinds = set().union(*map(needed, rules))
    if kinds & {"hyde", "hyde-dense"} and args.hypotheses is None:
        parser.error("the hyde rules need --hypotheses")
    answers = hypotheses(args.hypotheses)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    ranker = EmbeddingRanker(minilm_embed()) if kinds & {"dense", "hyde-dense"} else None
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
            hypothesis = f"{q.question} {answers.get((document.name, q.question), '')}"
            score = {"bm25": lambda: bm25_scores(passage_words, words(q.question)),
                     "dense": lambda: ranker.scores(index, q.question),
                     "hyde": lambda: bm25_scores(passage_words, words(hypothesis)),
                     "hyde-dense": lambda: ranker.scores(index, hypothesis)}
            scores = {kind: score[kind]() for kind in kinds}
            for rule in rules:
                chosen = rule_windows(rule, scores, spans, args.windows, args.tokens, len(ids))
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
