"""Refusing by meaning: whether an embedding's similarity of an answer to the windows' sentences tells the answers
`--refuse-unfound --unfound-in read` withholds wrongly (a paraphrase answered in the model's own words) from those it
withholds rightly. Offline, over the rows `research/answer_check_replay.py` wrote (each holds its windows' spans).

    python -m research.meaning_refusal --rows runs/refusal/q15-val.jsonl \\
        --model runs/qwen1.5b/qwen2.5-coder-1.5b-instruct
    python -m research.meaning_refusal --rows runs/refusal/q15-test.jsonl --model M --pardon 0.62 --answerable 0.725

Each document of the rows is tokenized as the replay tokenized it (`Session.read(defer=True)`; only the tokenizer is
used), its windows decoded, cut into sentences and pairs of neighbouring sentences, and embedded with
all-MiniLM-L6-v2. For every answer: the runs of its specific words the windows and question lack (`missing`, as the
shipped check finds them), and `answer_fit`, the largest cosine of the answer (its framing cut) with a window
sentence. The report sweeps the threshold of a pardon (an answer the lexical check withholds is kept where
`answer_fit` reaches it) with and without the model's own check (`--answerable`), and prints right / made up / bound
wrong / not-stated refused by kind for each rule; `--pardon` prints the rows of chosen thresholds only (a rule chosen
on another half). `--common 5000,20000` also reports the lexical check with the model vocabulary's first N whole words
taken as common (`vocabulary_words`): a right answer that adds an ordinary word of its own ("stopped", "received") is
then not withheld for it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
from pathlib import Path

import torch

from benchmarks.reader_routes import natural_questions
from locret_cli.api import load_session
from locret_cli.bench.rankers import minilm_embed
from locret_cli.bench.tasks import NATURAL
from locret_cli.checks import grounding
from locret_cli.checks.grounding import FRAME, SENTENCE_END, DocumentText, ground
from research.answer_check_replay import table_row

SWEEP = (0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8)


def sentences(text: str) -> list[str]:
    """The sentences of `text` (lines too: docstrings break without a full stop) and each pair of neighbours."""
    pieces = [s.strip() for part in SENTENCE_END.split(text) for s in part.split("\n") if len(s.strip()) > 3]
    return pieces + [a + " " + b for a, b in zip(pieces, pieces[1:])]


def vocabulary_words(tokenizer, first: int) -> frozenset[str]:
    """Lowercase words of two letters or more that a byte-level BPE tokenizer holds as one token after a space among
    its first `first` ids: its merges come roughly in order of frequency, so these are common words."""
    return frozenset(token[1:] for token, i in tokenizer.get_vocab().items()
                     if i < first and token.startswith("Ġ") and re.fullmatch("[a-z]{2,}", token[1:]))


@contextlib.contextmanager
def common_words(words: frozenset[str]):
    """Grounding takes `words` as common (never specific content) inside the block."""
    saved = grounding.COMMON
    grounding.COMMON = saved | words
    try:
        yield
    finally:
        grounding.COMMON = saved


def fits(rows: list[dict], model: Path, vocabulary: tuple[int, ...] = ()) -> None:
    """Adds `answer_fit` and `missing` to each row, and `unfound_common`: for each size in
    `vocabulary`, whether the lexical check withholds the answer with `vocabulary_words` of that size common."""
    session = load_session(str(model), device="cpu", dtype="fp32")
    embed = minilm_embed()
    unit = lambda texts: torch.nn.functional.normalize(embed(texts).float(), dim=-1)  # noqa: E731
    for name in dict.fromkeys(r["set"] for r in rows):
        documents = natural_questions(NATURAL[name], 1 + max(r["document"] for r in rows if r["set"] == name))
        for index, (document, _, _) in enumerate(documents):
            mine = [r for r in rows if r["set"] == name and r["document"] == index]
            if not mine:
                continue
            reading = session.read(document, defer=True)
            ids, tokenizer = reading.input_ids, reading.tokenizer
            widened = {first: vocabulary_words(tokenizer, first) for first in vocabulary}
            for row in mine:
                texts = [tokenizer.decode(ids[a:b].tolist(), skip_special_tokens=True) for a, b in row["windows"]]
                read = DocumentText(texts + [row["question"]], [""] * (len(texts) + 1))
                row["missing"] = [s.text for s in ground(row["question"], row["answer"], read).spans
                                  if s.status == "missing"]
                row["unfound_common"] = {}
                for first, words in widened.items():
                    with common_words(words):
                        status = ground(row["question"], row["answer"], read).status
                    row["unfound_common"][first] = status == "not_found"
                window = unit(sentences("\n\n".join(texts)))
                said = unit([FRAME.sub(" ", row["answer"]).strip() or row["answer"]])
                row["answer_fit"] = (window @ said[0]).max().item()


def report(rows: list[dict], pardons: tuple[float, ...], answerable: float, vocabulary: tuple[int, ...] = ()) -> None:
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    print(f"| refused where | right | made up | bound wrong | not-stated refused | {' / '.join(kinds)} |")
    print("|---|---:|---:|---:|---:|---|")
    checked = lambda r: r["answerable"] < answerable  # noqa: E731
    rules = [("as said", lambda r: False), ("the windows lack its words", lambda r: r["wrefused"]),
             (f"shipped: that, or answerable < {answerable:g}", lambda r: r["wrefused"] or checked(r)),
             (f"answerable < {answerable:g} alone", checked),
             (f"lacking words and answerable < {answerable:g}", lambda r: r["wrefused"] and checked(r))]
    for t in pardons:
        pardoned = lambda r, t=t: r["wrefused"] and r["answer_fit"] < t  # noqa: E731
        rules += [(f"lacking words and answer fit < {t:g}", pardoned),
                  (f"lacking words and fit < {t:g}, or answerable < {answerable:g}",
                   lambda r, p=pardoned: p(r) or checked(r))]
    for first in vocabulary:
        lexical = lambda r, first=first: r["unfound_common"][first]  # noqa: E731
        rules += [(f"lacking words, the vocabulary's first {first} common", lexical),
                  (f"lacking words, the first {first} common, or answerable < {answerable:g}",
                   lambda r, p=lexical: p(r) or checked(r))]
    for label, refuses in rules:
        print(table_row(label, rows, refuses, kinds))
    print("\nwithheld by the windows' words: answer fit of the right answers, of the others")
    withheld = [r for r in rows if r["wrefused"]]
    for verdict in ("right", "wrong"):
        fit = sorted(round(r["answer_fit"], 3) for r in withheld if (r["verdict"] == "right") == (verdict == "right"))
        print(f"  {verdict}: {fit}")
    print("\nwithheld by the windows' words, each answer's missing runs")
    for r in sorted(withheld, key=lambda r: r["answer_fit"]):
        print(f"  {r['verdict']:11} {r['kind']:10} fit {r['answer_fit']:.3f} missing {r['missing']}: {r['answer']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True, help="the replay's model (for its tokenizer)")
    parser.add_argument("--pardon", default="", help="comma-separated thresholds (default: a sweep)")
    parser.add_argument("--answerable", type=float, default=0.725)
    parser.add_argument("--common", default="", help="comma-separated vocabulary sizes whose words the lexical "
                                                      "check also takes as common (`vocabulary_words`)")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.rows.open() if line.strip()]
    vocabulary = tuple(int(n) for n in args.common.split(",") if n)
    fits(rows, args.model, vocabulary)
    report(rows, tuple(float(t) for t in args.pardon.split(",") if t) or SWEEP, args.answerable, vocabulary)


if __name__ == "__main__":
    main()
