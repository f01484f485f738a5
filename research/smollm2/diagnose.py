"""Why eviction loses facts on SmolLM2: where the labels and the heads rank a fact's tokens, what the cache holds
after a long read, and how accuracy moves with the budget. Figures in docs/measurements/smollm2-choices.md.

    python -m research.smollm2.diagnose ranks --prose-packages runs/prose-packages       # dev prose, 3K tokens
    python -m research.smollm2.diagnose kept --prose-packages runs/prose-packages        # dev prose, 32K tokens
    python -m research.smollm2.diagnose budgets --prose-packages runs/prose-packages 1024/1 4096/1 4096/7

`budgets` reads training prose only (documents seeded apart from the training records), so choosing the recorded
default from it never looks at the dev set.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

import torch

from benchmarks.smollm2.evaluate import dev_documents
from locret_cli.api import Session, load_session
from locret_cli.bench.scoring import contains_match
from locret_cli.core.attention.capture import capture_qkv
from locret_cli.inputs.prompt import end_of_turn_id, prompt_layout, question_text
from locret_cli.inputs.tokenizer import encode_text
from locret_cli.training.labels import compute_labels
from recipes import prose
from recipes.smollm2 import documents, heads_data

LAYERS = (0, 5, 10, 15, 20, 25, 29)


def ranks(session: Session, paragraphs: list[str]) -> None:
    """For one fact in a 3K-token document: the best rank of its tokens by label and by the heads' score, as a
    percentile of the prompt (KV head 0), and the tokens each ranks first."""
    model, tokenizer = session.loaded.model, session.loaded.tokenizer
    document = documents.build(paragraphs, 3000, documents.facts_for(random.Random(5), 3), 11)
    fact, layout = document.facts[1], prompt_layout(tokenizer)
    prompt = layout.head_ids + encode_text(tokenizer, document.text + question_text(fact.question)) + layout.tail_ids
    answer = encode_text(tokenizer, heads_data.reply(fact)) + [end_of_turn_id(tokenizer, model)]
    labels = compute_labels(model, prompt, answer)  # (layers, kv_heads, T)
    scores = {}
    with torch.no_grad(), capture_qkv(model, lambda i, q, k, v: scores.__setitem__(i, session.heads.score(i, q, k, v))):
        model.model(input_ids=torch.tensor([prompt]))
    statement = encode_text(tokenizer, fact.statement)
    start = next(i for i in range(len(prompt)) if prompt[i:i + len(statement)] == statement)
    print(f"{len(prompt)} prompt tokens; the fact \"{fact.statement}\" at token {start}")
    print("| layer | fact's best rank by label | by the trained heads | label's top tokens |\n|---:|---:|---:|---|")
    for layer in LAYERS:
        found = []
        for values in (labels[layer, 0], scores[layer][0, 0].float()):
            order = values.argsort(descending=True)
            rank = torch.empty_like(order)
            rank[order] = torch.arange(len(prompt))
            found.append(min(rank[start:start + len(statement)].tolist()) / len(prompt))
        top = tokenizer.decode([prompt[i] for i in labels[layer, 0].argsort(descending=True)[:12].tolist()])
        print(f"| {layer} | top {100 * found[0]:.1f}% | top {100 * found[1]:.1f}% | `{top!r}` |")


def kept(session: Session, paragraphs: list[str]) -> None:
    """Read the first 32K dev document at budget 1024 and print, per layer, the text of the first kept entries."""
    document = dev_documents(paragraphs, 32000)[0]
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(document.text)
        f.flush()
        reading = session.read(f.name, session.plan(read={"budget": 1024}).read)
    tokenizer = session.loaded.tokenizer
    ids = encode_text(tokenizer, document.text)
    pinned = reading.engine.pinned
    for layer in LAYERS:
        origins = reading.engine.cache.layers[layer].origins[0, 0].tolist()
        text = tokenizer.decode([ids[i - pinned] for i in origins if pinned <= i < pinned + len(ids)][:120])
        print(f"layer {layer}: {text!r}")


def budgets(session: Session, paragraphs: list[str], choices: list[str]) -> None:
    """Accuracy on two 32K-token documents of training prose with six facts each, per budget/score pool."""
    for choice in choices:
        budget, pool = map(int, choice.split("/"))
        right = total = 0
        for seed in (900, 901):
            document = documents.build(paragraphs, 32000, documents.facts_for(random.Random(seed), 6), seed)
            with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
                f.write(document.text)
                f.flush()
                reading = session.read(f.name, session.plan(read={"budget": budget, "score_pool": pool}).read)
            for fact in document.facts:
                answer = reading.ask(fact.question, session.plan(answer={"max_new_tokens": 24}).answer).answer
                right += contains_match(answer, fact.answer)
                total += 1
        print(f"budget {budget}, score pool {pool}: {right}/{total}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("ranks", "kept", "budgets"))
    parser.add_argument("choices", nargs="*", help="budgets: BUDGET/SCORE_POOL pairs")
    parser.add_argument("--prose-packages", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(2)
    session = load_session("smollm2", device="cpu", dtype="bf16")
    if args.what == "budgets":
        budgets(session, prose.paragraphs(prose.TRAIN_PACKAGES, args.prose_packages), args.choices)
    else:
        dev = prose.paragraphs(prose.DEV_PACKAGES, args.prose_packages)
        (ranks if args.what == "ranks" else kept)(session, dev)


if __name__ == "__main__":
    main()
