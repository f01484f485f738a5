"""What any heads trained on a label could keep at 128K: on 2,000-token documents, where a label can be computed,
the share of statements whose best score beats the score a filler entry needs to be among the top
(budget − stabilizers) entries of a `--length`-token document, per layer and KV head.

    python -m research.embedded.label_ceiling --documents 12 --prose-packages runs/prose-packages \\
        [--heads locret_cli/models/embedded_model/heads other/heads] [--model runs/candidate/model]

Scorers: the paper's label (the max over answer positions and the KV group's query heads of the pre-softmax score,
`training/labels.py`), the attention mass (the log of the attention the answer pays the entry, summed over answer
positions and query heads), both maxed over the document's questions as the `oracle` policy takes them, so they
know the questions; and the shipped heads' and each `--heads`' own scores, which do not. `--model` takes a
candidate model's labels instead of the shipped one's (its heads then only through `--heads`). Every score is
pooled as the engine pools it (`--score-pool`). The threshold is the filler's quantile 1 − (budget − stabilizers)
/ length over all documents: a statement below it is, at that length, outranked by that many filler entries.
Validation documents (seeds and prose of `evaluate.py --split validation`), so the figures never tune on the dev
set.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.embedded.evaluate import SELECTION_SEED, reading_ids, spans_in
from locret_cli.api import Session
from locret_cli.core.attention.probe import observe_attention
from locret_cli.inputs.documents import text_document
from locret_cli.inputs.prompt import build_prompt, prompt_layout
from locret_cli.models.embedded import load_embedded
from locret_cli.models.heads_files import load_heads
from locret_cli.models.loading import load_model
from locret_cli.settings import ReadSettings
from locret_cli.training.labels import answer_to_prompt_max
from recipes import prose
from recipes.build_embedded import DEFAULTS
from recipes.embedded.qa_data import answer_text
from recipes.embedded.validation import prose_document
from research.embedded.rank_statements import RecordingPolicy, statement_mask

MASS_FLOOR = 1e-6


def attention_mass(query: torch.Tensor, key: torch.Tensor, prompt_length: int, scaling: float) -> torch.Tensor:
    """query (1, H, T, D), key (1, Hkv, T, D) -> (Hkv, prompt_length): log of the softmax attention each prompt
    token gets from the answer's queries (T > p >= prompt_length, each seeing keys up to itself), summed over answer
    positions and each KV head's query group, floored at MASS_FLOOR."""
    group = query.shape[1] // key.shape[1]
    answers, keys = query[0, :, prompt_length:].float(), key[0].float()
    sees = torch.arange(keys.shape[1])[None, :] <= prompt_length + torch.arange(answers.shape[1])[:, None]
    mass = []
    for g in range(key.shape[1]):
        scores = (answers[g * group:(g + 1) * group] @ keys[g].T * scaling).masked_fill(~sees, float("-inf"))
        mass.append(scores.softmax(-1)[..., :prompt_length].sum((0, 1)))
    return torch.stack(mass).clamp_min(MASS_FLOOR).log()


LABELS = {"paper's label (max score)": answer_to_prompt_max, "attention mass": attention_mass}


@torch.no_grad()
def label_scores(model, tokenizer, document: list[int], facts, pool: int) -> dict[str, list[torch.Tensor]]:
    """Per label, per layer: (kv_heads, len(document)) pooled scores, maxed over the facts' questions."""
    out: dict[str, dict[int, torch.Tensor]] = {name: {} for name in LABELS}
    for fact in facts:
        ids = document + build_prompt(tokenizer, fact.question).question_ids
        prompt_length = len(ids)

        def observe(layer, query, key, scaling):
            for name, label in LABELS.items():
                got = label(query, key, prompt_length, scaling)[:, :len(document)]
                out[name][layer] = torch.maximum(out[name][layer], got) if layer in out[name] else got

        with observe_attention(model, observe):
            model.model(input_ids=torch.tensor([ids + tokenizer.encode(answer_text(fact))], device=model.device))
    return {name: [F.max_pool1d(layers[i].cpu(), pool, 1, pool // 2) for i in sorted(layers)]
            for name, layers in out.items()}


def kept_counts(documents: list[tuple[list[torch.Tensor], list[tuple[int, int]]]], quantile: float,
                reach: int) -> list[str]:
    """documents: (per-layer (kv_heads, T) scores, statement spans). 'kept/statements' per layer and KV head. The
    filler is every entry more than `reach` from a statement: a nearer one took a statement's score in the pool,
    which at 128K, with the statements 0.1% of the entries, is no part of the filler's tail."""
    cells = []
    fillers = [~statement_mask(s[0].shape[-1], sp, reach) for s, sp in documents]
    for layer in range(len(documents[0][0])):
        for head in range(documents[0][0][layer].shape[0]):
            filler = torch.cat([s[layer][head][mask] for (s, _), mask in zip(documents, fillers)])
            threshold = filler.quantile(quantile)
            kept = sum(int(s[layer][head][a:b].max() > threshold) for s, sp in documents for a, b in sp)
            cells.append(f"{kept}/{sum(len(sp) for _, sp in documents)}")
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=12)
    parser.add_argument("--length", type=int, default=128000, help="the document length the threshold stands for")
    parser.add_argument("--heads", type=Path, nargs="*", default=[], help="heads whose own scores to rank too")
    parser.add_argument("--model", type=Path, help="a candidate model directory (default: the shipped model)")
    parser.add_argument("--prose-packages", type=Path, help="prose.py's `pip install --target` folder")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.model:
        loaded, own = load_model(str(args.model), device="cpu", dtype="auto"), {}
    else:
        loaded, shipped = load_embedded()
        own = {"shipped heads": shipped}
    tokenizer, model = loaded.tokenizer, loaded.model
    settings = ReadSettings(budget=4096, chunk_size=DEFAULTS["chunk_size"], stabilizers=DEFAULTS["stabilizers"],
                            score_pool=DEFAULTS["score_pool"])  # a budget no 2,000 tokens reach
    quantile = 1 - (DEFAULTS["budget"] - DEFAULTS["stabilizers"]) / args.length
    paragraphs = prose.paragraphs(prose.TRAIN_PACKAGES, args.prose_packages)
    prefix = prompt_layout(tokenizer).head_ids
    heads = own | {f"heads {p}": load_heads(p, model) for p in args.heads}
    rows: dict[str, list] = {name: [] for name in [*LABELS, *heads]}
    for d in range(args.documents):
        facts, text = prose_document(tokenizer, random.Random(SELECTION_SEED + 97 * 2000 + d), 2000, paragraphs)
        document = reading_ids(tokenizer, prefix, text, settings.chunk_size)  # what labels and heads both see
        spans = spans_in(tokenizer, document, facts)
        for name, scores in label_scores(model, tokenizer, document, facts, settings.score_pool).items():
            rows[name].append((scores, spans))
        for name, scorer in heads.items():
            policy = RecordingPolicy(scorer, settings.score_pool)
            Session(loaded, scorer).read(text_document(text), settings, force=True, policy=policy)
            rows[name].append(([torch.cat(policy.scores[i], -1) for i in sorted(policy.scores)], spans))
    first = rows[next(iter(LABELS))][0][0]
    columns = [f"layer {layer} KV {head}" for layer in range(len(first)) for head in range(first[0].shape[0])]
    print(f"statements above the top {DEFAULTS['budget'] - DEFAULTS['stabilizers']:,} of {args.length:,} entries\n")
    print("| scorer | " + " | ".join(columns) + " |\n|---|" + "---:|" * len(columns))
    for name, documents in rows.items():
        print(f"| {name} | " + " | ".join(kept_counts(documents, quantile, settings.score_pool // 2)) + " |")


if __name__ == "__main__":
    main()
