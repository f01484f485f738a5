"""Exact-match accuracy of a model on dev documents: held-out vocabulary, seeds training never used.

Each document holds one pass key and (by default) four attribute facts at random depths, in filler mixing template
prose, the held-out part of the reference text and word salad, or with `--filler prose` in real prose from Python
packages training never read (`recipes/prose.py`'s DEV_PACKAGES; the same facts, seed for seed). The document is
read once per policy (`Session.read`); each question is then answered on a fork of its cache (eviction does not
depend on the question).

    python -m benchmarks.embedded.evaluate --model runs/embedded/model --heads runs/embedded/heads \\
        --lengths 2000:full,32000,128000 --policies locret,streaming --documents 10

`--by-type` adds a table of errors by answer type and `--answers` lists every answer beside the expected one; the
`oracle` policy scores entries with their training labels (benchmarks/embedded/diagnose.py). Two more tables split the
outcomes by the fact's depth and by how much of its statement eviction kept (`kept_share`).
"""

from __future__ import annotations

import argparse
import random
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from benchmarks.embedded.diagnose import (
    StatementKeeper,
    depth_table,
    error_kind,
    kept_share,
    kept_table,
    label_oracle,
    type_table,
    value_type,
)
from locret_cli.api import Session
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies.locret import LocretPolicy
from locret_cli.inputs.documents import Document, text_document, token_chunks
from locret_cli.inputs.prompt import prompt_layout
from locret_cli.models.embedded import not_stated_reply, says_not_stated
from locret_cli.models.heads_files import load_heads
from locret_cli.models.loading import DTYPES, load_model
from locret_cli.settings import AnswerSettings, ReadSettings
from recipes import prose
from recipes.build_embedded import DEFAULTS
from recipes.embedded.qa_data import fragments
from recipes.embedded.validation import absent_questions, dev_document, prose_document

DEV_SEED = 10_000
# `--split validation` documents, for choosing between candidates so the dev figures stay unbiased: seeds of their
# own (not validation.VALIDATION_SEED's, which pretraining selects its weights on), and real prose from the training
# packages (prose.TRAIN_PACKAGES), never a dev package.
SELECTION_SEED = 70_000
ABSENT_SEED = 30_000
FRAGMENT_SEED = 40_000  # the unanswerable questions' own stream, so the documents stay as they were

ANSWERING = AnswerSettings(max_new_tokens=DEFAULTS["max_new_tokens"])  # as the embedded model records it


@dataclass
class Outcome:
    policy: str
    length: int
    kind: str
    correct: bool
    answer: str
    expected: str
    value_type: str
    error: str
    depth: float  # where the statement starts, 0 = the document's start, 1 = its end
    kept: float  # the share of the statement's entries in the cache when the question came (kept_share)


def evaluate(loaded, heads, lengths: list[tuple[int, str | None]], policies: list[str], documents: int,
             settings: ReadSettings, log, attributes: int = 4, passkey: bool = True,
             paragraphs: list[str] | None = None, unanswerable: int = 0, fragment: float = 1.0,
             seed: int = DEV_SEED, keep_statements: set[int] | None = None,
             possessive: bool = False) -> list[Outcome]:
    """Read each document once per policy and ask every fact's question on a fork, then `unanswerable` questions
    the document does not answer (kind "absent": right when the answer says it is not stated,
    `embedded.says_not_stated`); `paragraphs` (real prose) replace the generated filler. With `fragment` below 1, a
    document 1/fragment times as long is cut to runs of its filler (`qa_data.fragments`), statements whole: what a
    bounded cache holds, read without any eviction. With `keep_statements`, locret's heads never drop a statement's
    entries in those layers (`diagnose.StatementKeeper`); with `possessive`, every attribute is a possessive one
    (`validation.with_possessive`). Document d of `length` tokens is drawn from the seed seed + 97·length + d."""
    tokenizer, model = loaded.tokenizer, loaded.model
    outcomes = []
    for length, only in lengths:
        for d in range(documents):
            rng = random.Random(seed + 97 * length + d)
            made = round(length / fragment)
            facts, text = (prose_document(tokenizer, rng, made, paragraphs, attributes, passkey, possessive)
                           if paragraphs else dev_document(tokenizer, rng, made, attributes, passkey, possessive))
            prefix = prompt_layout(tokenizer).head_ids
            if fragment < 1:
                text = fragmented(tokenizer, text, facts, fragment, random.Random(FRAGMENT_SEED + d))
            spans = statement_spans(tokenizer, prefix, text, facts, settings.chunk_size)
            for policy_name in ([only] if only else policies):
                started = time.perf_counter()
                session = Session(replace(loaded, defaults={**loaded.defaults, "policy": policy_name}), heads)
                policy = None
                if policy_name == "oracle":
                    policy = label_oracle(model, tokenizer, prefix, text, facts)
                elif policy_name == "locret" and keep_statements:
                    policy = StatementKeeper(LocretPolicy(heads, settings.score_pool), spans, keep_statements)
                reading = session.read(text_document(text), settings, force=True, policy=policy)
                for fact, (first, last) in zip(facts, spans):
                    answer = reading.ask(fact.question, ANSWERING, sources=0).answer
                    depth = (first - len(prefix)) / max(1, reading.engine.document_tokens - len(prefix))
                    outcomes.append(Outcome(policy_name, length, fact.kind, answer == fact.reply, answer, fact.reply,
                                            value_type(fact), error_kind(answer, fact, facts), depth,
                                            kept_share(reading.engine.cache, first, last)))
                right = sum(o.correct for o in outcomes[-len(facts):])
                absent = random.Random(ABSENT_SEED + 97 * length + d)
                for question in absent_questions(absent, facts, unanswerable):
                    answer = reading.ask(question, ANSWERING, sources=0).answer
                    silent = says_not_stated(answer)
                    outcomes.append(Outcome(policy_name, length, "absent", silent, answer, not_stated_reply(question),
                                            "absent", "right" if silent else "false answer", 0.0, 0.0))
                log(f"{policy_name} length {length} document {d}: {reading.engine.document_tokens} tokens, "
                    f"{right}/{len(facts)} right, "
                    f"{time.perf_counter() - started:.1f} s")
    return outcomes


def fragmented(tokenizer, text: str, facts, keep: float, rng: random.Random) -> str:
    """`text` with its filler cut to runs of 1-8 tokens, each kept with probability `keep`; statements stay whole."""
    ids = tokenizer.encode(text)
    parts, at = [], 0
    for first, last in sorted(statement_spans(tokenizer, [], text, facts, len(ids) + 1)):
        parts += [tokenizer.decode(fragments(rng, ids[at:first], keep)), tokenizer.decode(ids[first:last]).strip()]
        at = last
    return " ".join(parts + [tokenizer.decode(fragments(rng, ids[at:], keep))])


def statement_spans(tokenizer, prefix: list[int], text: str, facts, chunk_size: int) -> list[tuple[int, int]]:
    """Each fact's statement as token indices [first, last) of the reading's input, found in the ids the chunked
    read produces (its first token, which may carry the space before it, is located from the second)."""
    return spans_in(tokenizer, reading_ids(tokenizer, prefix, text, chunk_size), facts)


def reading_ids(tokenizer, prefix: list[int], text: str | Document, chunk_size: int) -> list[int]:
    """The token ids a chunked read of `text` (or an opened document) takes in, `prefix` first."""
    document = text_document(text) if isinstance(text, str) else text
    return [i for chunk in token_chunks(document, tokenizer, chunk_size, prefix) for i in chunk.ids]


def spans_in(tokenizer, ids: list[int], facts) -> list[tuple[int, int]]:
    """Each fact's statement as [first, last) indices of `ids`, found from its second token to its last, or to the
    one before it where the text after the statement merges with its last token (".\n\n" in Qwen's vocabulary)."""
    spans = []
    for fact in facts:
        encoded = tokenizer.encode(" " + fact.statement)[1:]
        for needle in (encoded, encoded[:-1]):
            at = next((j for j in range(len(ids) - len(needle) + 1) if ids[j:j + len(needle)] == needle), None)
            if at is not None:
                spans.append((at - 1, at + len(encoded)))
                break
        else:
            raise SystemExit(f"statement not found in the document's tokens: {fact.statement}")
    return spans


def table(outcomes: list[Outcome]) -> str:
    """Markdown: exact match per (policy, length), split by question kind."""
    cells = defaultdict(list)
    for o in outcomes:
        cells[(o.policy, o.length, o.kind)].append(o.correct)
        if o.kind != "absent":
            cells[(o.policy, o.length, "all")].append(o.correct)
    rows = ["| policy | document tokens | pass key | attribute | all | false answers to unanswerable questions |",
            "|---|---:|---:|---:|---:|---:|"]
    for policy, length in sorted({(p, n) for p, n, _ in cells}, key=lambda x: (x[1], x[0])):
        parts = []
        for kind in ("passkey", "attribute", "all", "absent"):
            hits = cells[(policy, length, kind)]
            if kind == "absent":
                hits = [not hit for hit in hits]  # a false answer is any answer but not stated
            parts.append(f"{100 * sum(hits) / len(hits):.0f}% ({sum(hits)}/{len(hits)})" if hits else "-")
        rows.append(f"| {policy} | {length:,} | " + " | ".join(parts) + " |")
    return "\n".join(rows)


def parse_lengths(spec: str) -> list[tuple[int, str | None]]:
    out = []
    for item in spec.split(","):
        length, _, only = item.partition(":")
        out.append((int(length), only or None))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="Evaluate a model and heads on dev documents.")
    parser.add_argument("--model", required=True)
    parser.add_argument("--heads", help="trained heads; omit for random heads")
    parser.add_argument("--lengths", default="2000:full,32000,128000")
    parser.add_argument("--policies", default="locret,streaming",
                        help="any of locret's policies, and `oracle`: the training labels as scores (diagnose.py)")
    parser.add_argument("--documents", type=int, default=10)
    parser.add_argument("--budget", type=int, default=DEFAULTS["budget"])
    parser.add_argument("--chunk-size", type=int, default=DEFAULTS["chunk_size"])
    parser.add_argument("--stabilizers", type=int, default=DEFAULTS["stabilizers"])
    parser.add_argument("--score-pool", type=int, default=DEFAULTS["score_pool"])
    parser.add_argument("--kv-bits", type=int, default=16, choices=(16, 8, 4), help="bits per cached key and value")
    parser.add_argument("--lazy-after", type=int, default=0, help="lazy prefill: prune after this many layers")
    parser.add_argument("--lazy-share", type=float, default=1.0, help="lazy prefill: most of a chunk pruned")
    parser.add_argument("--attributes", type=int, default=4, help="attribute facts per document (plus a pass key)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", choices=("auto", *DTYPES), default="auto",
                        help="auto: as locret ask (bf16 on CUDA; on the CPU the faster in this machine's probe); "
                             "answers can differ by dtype")
    parser.add_argument("--by-type", action="store_true", help="also count errors by answer type (diagnose.py)")
    parser.add_argument("--no-passkey", action="store_true",
                        help="attribute facts only: the answer must come from matching the question, not its kind")
    parser.add_argument("--answers", action="store_true", help="also list every expected answer and the model's")
    parser.add_argument("--filler", choices=("generated", "prose"), default="generated",
                        help="prose: real prose from packages training never read (recipes/prose.py)")
    parser.add_argument("--fragment", type=float, default=1.0,
                        help="keep this share of the filler, in runs, statements whole (full cache: the model "
                             "reading what eviction leaves, without eviction)")
    parser.add_argument("--unanswerable", type=int, default=0,
                        help="questions per document that it does not answer (validation.absent_questions)")
    parser.add_argument("--split", choices=("dev", "validation"), default="dev",
                        help="validation: documents of their own seeds, prose from the training packages, for "
                             "choosing between candidates")
    parser.add_argument("--possessive", action="store_true",
                        help="possessive attributes (\"the keeper's name of ...\"), a form training never used")
    parser.add_argument("--keep-statements", help="layers (comma-separated) where locret never drops a statement's "
                                                   "entries (diagnose.StatementKeeper)")
    parser.add_argument("--prose-packages", type=Path,
                        help="a `pip install --target` folder holding the prose packages not installed (prose.py)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(args.model, device=args.device, dtype=args.dtype)
    heads = load_heads(args.heads, loaded.model) if args.heads else RetainingHeads.for_model(loaded.model).eval()
    settings = ReadSettings(budget=args.budget, chunk_size=args.chunk_size, stabilizers=args.stabilizers,
                            score_pool=args.score_pool, kv_bits=args.kv_bits, lazy_after=args.lazy_after,
                            lazy_share=args.lazy_share)
    validation = args.split == "validation"
    packages = prose.TRAIN_PACKAGES if validation else prose.DEV_PACKAGES
    outcomes = evaluate(loaded, heads, parse_lengths(args.lengths), args.policies.split(","), args.documents,
                        settings, lambda m: print(m, flush=True), args.attributes, not args.no_passkey,
                        prose.paragraphs(packages, args.prose_packages) if args.filler == "prose" else None,
                        args.unanswerable, args.fragment, SELECTION_SEED if validation else DEV_SEED,
                        {int(x) for x in args.keep_statements.split(",")} if args.keep_statements else None,
                        args.possessive)
    answered = [o for o in outcomes if o.kind != "absent"]
    print(f"\n{loaded.dtype_reason}; budget {args.budget}, chunk {args.chunk_size}, stabilizers {args.stabilizers}, "
          f"score pool {args.score_pool}, {args.kv_bits}-bit cache, lazy after {args.lazy_after} layers (share "
          f"{args.lazy_share}), heads {args.heads or 'random'}, filler {args.filler}, "
          f"fragment {args.fragment}, {args.split} documents"
          + (f", statements kept in layers {args.keep_statements}" if args.keep_statements else "")
          + (", possessive attributes" if args.possessive else "") + "\n")
    print(table(outcomes))
    print("\n" + depth_table([(o.policy, o.length, o.depth, o.correct) for o in answered]))
    print("\n" + kept_table([(o.policy, o.length, o.kept, o.correct) for o in answered]))
    if args.by_type:
        print("\n" + type_table([(o.policy, o.length, o.value_type, o.error) for o in answered]))
    if args.answers:
        print("\n| policy | document tokens | depth | statement kept | answer type | expected | answered |\n"
              "|---|---:|---:|---:|---|---|---|")
        for o in outcomes:
            where = "- | -" if o.kind == "absent" else f"{o.depth:.0%} | {o.kept:.0%}"
            print(f"| {o.policy} | {o.length:,} | {where} | {o.value_type} | {o.expected} | {o.answer} |")


if __name__ == "__main__":
    main()
