"""Train the embedded model from scratch on generated QA documents, short to long (see shared notes on tiny
retrieval training: a curriculum over length with several facts per document from the start).

Each stage (`Stage`) has a document length, a fact count and a batch size. A stage ends `settle` steps after the
teacher-forced accuracy on whole answers to questions asked for the first time in their document, averaged over the
last 20 steps, passes its threshold. Each stage starts a fresh AdamW whose learning rate warms up and then stays
constant, and draws its data from its own seeded stream, so a run resumed at a stage boundary (`resume=True`, from
OUT/pretrain.pt) follows exactly the path of an uninterrupted one. The loss is cross-entropy on answer tokens only,
and the LM head runs only there. A stage with `average_last` ends on an exponential moving average of its weights
over its last steps. A `keep_best` stage scores the validation split (`validation.py`) every `validate_every` steps
and at its end, keeps the best weights in OUT/best.pt, and the run ends on them.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from locret_cli.inputs.tokenizer import TIKTOKEN_FILE
from locret_cli.models.loading import resolve_dtype
from recipes import prose
from recipes.embedded.qa_data import IGNORE, Example, FillerPool, collate, facts_for, qa_example, word_pieces
from recipes.embedded.unanswerable import absent_question
from recipes.embedded.validation import validation_set


@dataclass(frozen=True)
class Stage:
    length: int  # document tokens
    facts: int  # facts per document
    questions: int  # questions per document
    batch: int
    threshold: float  # whole-answer accuracy to pass
    invented: float  # share of facts with made-up attributes
    settle: int = 0  # steps run on after passing
    fragmented: float = 0.0  # share of documents whose filler is cut to scattered runs (`qa_data.fragments`)
    keep_best: bool = False  # validate every `validate_every` steps and end on the best weights (`validation`)
    average_last: int = 0  # end on a moving average of the weights (`average_decay`) over this many last steps
    absent: float = 0.0  # share of questions the document does not answer (`unanswerable.py`), answered not stated
    prose: float = 0.0  # share of documents whose filler is real prose (`recipes/prose.py`, MODEL_PACKAGES)
    possessive: float = 0.0  # share of attribute facts with a possessive attribute (`possessive.possessive_fact`)
    lr: float | None = None  # peak learning rate, `PretrainConfig.lr` when None


# Each question picks its fact independently, repeats allowed (`qa_example`): when every fact is asked once, the last
# answers follow by elimination, a shortcut that kept the third run's model from matching questions to statements;
# and a repeated question is an exact repeat to copy from, which teaches copying sooner (fourth run, docs). Stages
# advance on whole-answer accuracy, which the easy tokens after a wrong first one cannot inflate. Word values are
# always made up from the tokenizer's own pieces, made-up syllables or English words (`synthetic.invented_word`),
# and from 192 tokens on part of the attributes and kinds are too: with short lists to draw from, the model learns
# the lists and recalls instead of copying. The last stage teaches the model to read a document as locret's cache
# holds it, statements whole among scattered runs of filler (docs/embedded-model.md, seventh run). The fifth teaches
# it to say that no statement matches ("The gate code of the north depot is not stated.": `unanswerable.py`), in
# generated filler and in real prose, at a lower learning rate so that what it knew stays (docs, Saying "not
# stated"); its model is a candidate, not the shipped one.
STAGES = [Stage(48, 2, 4, 64, 0.9, 0.0), Stage(192, 6, 6, 32, 0.9, 0.35), Stage(768, 10, 10, 8, 0.92, 0.5),
          Stage(1980, 16, 16, 4, 0.95, 0.5, settle=300),
          Stage(1980, 16, 16, 4, 0.95, 0.5, settle=2075, fragmented=0.5, keep_best=True,
                average_last=75),
          Stage(1980, 16, 16, 4, 0.0, 0.5, settle=500, fragmented=0.5, keep_best=True, average_last=75,
                absent=0.25, prose=0.3, possessive=0.15, lr=2e-4)]
VALIDATION_ABSENT = 2  # absent questions per validation document in stages that teach them


@dataclass
class PretrainConfig:
    seed: int = 0
    hidden: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 704
    max_positions: int = 2048
    lr: float = 1e-3
    warmup: int = 50
    window: int = 20
    max_steps_per_stage: int = 6000  # cheap short stages may run long: the retrieval circuit forms there
    checkpoint_every: int = 100
    validate_every: int = 100
    validation_documents: int = 60
    average_decay: float = 0.97
    max_minutes: float = 90.0
    device: str = "cpu"  # the same recipe runs on "cuda", in minutes instead of hours (docs/embedded-model.md)


def model_config(tokenizer, cfg: PretrainConfig) -> LlamaConfig:
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads,
        max_position_embeddings=cfg.max_positions, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=None,
        attn_implementation="sdpa",
    )
    return config


def answer_loss(model, ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy on answer tokens (logits only where a label is) and, per answer, whether its every token is
    predicted right. ids, labels: (B, T); answers are the runs of labelled positions, in row-major order; returns
    the loss and right: (answers,) bool."""
    hidden = model.model(input_ids=ids).last_hidden_state[:, :-1]
    targets = labels[:, 1:]
    chosen = targets != IGNORE
    logits = model.lm_head(hidden[chosen]).float()
    loss = F.cross_entropy(logits, targets[chosen])
    starts = chosen & ~F.pad(chosen, (1, 0))[:, :-1]
    answer_of_token = starts.flatten().cumsum(0)[chosen.flatten()] - 1
    wrong = torch.zeros(int(starts.sum()), device=ids.device).index_add_(
        0, answer_of_token, (logits.argmax(-1) != targets[chosen]).float())
    return loss, wrong == 0


def uses_bf16(device: torch.device) -> bool:
    """Whether to train in bf16 autocast: on CUDA, and on a CPU where bf16 runs faster than fp32 (an AVX2-only
    CPU runs bf16 products tens of times slower: `runtime/dtype_probe.py`)."""
    return device.type == "cuda" or resolve_dtype("auto", device) == torch.bfloat16


class Validation(NamedTuple):
    """Shares of the validation questions answered exactly: all of them, those the document answers, and those it
    does not (None when none were asked)."""
    all: float
    stated: float
    silent: float | None


@torch.no_grad()
def validation_accuracy(model, batches: list[tuple[torch.Tensor, torch.Tensor]], absent: int = 0) -> Validation:
    """Scores `validation.validation_set(..., absent=absent)`: its batches' last `absent` rows are the questions the
    document does not answer."""
    device = next(model.parameters()).device
    rights, bf16 = [], uses_bf16(device)
    for ids, labels in batches:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            rights.append(answer_loss(model, ids.to(device), labels.to(device))[1].cpu())
    right = torch.stack(rights).float()  # (documents, rows)
    stated, silent = right[:, :right.shape[1] - absent], right[:, right.shape[1] - absent:]
    return Validation(right.mean().item(), stated.mean().item(), silent.mean().item() if absent else None)


def first_asks(examples: list[Example]) -> torch.Tensor:
    """(answers,) bool, row-major: whether each answer is its fact's first in the example. Only those count towards
    a stage's accuracy; a repeated question is answered by copying the earlier answer, which is easier."""
    return torch.tensor([fact not in example.asked[:i] for example in examples
                         for i, fact in enumerate(example.asked)])


def pretrain(tokenizer, out: Path, cfg: PretrainConfig, log, resume: bool = False) -> tuple[LlamaForCausalLM, bool]:
    """Run the curriculum, checkpointing to OUT/pretrain.pt every `checkpoint_every` steps and at every stage end;
    with `resume`, continue exactly from that checkpoint (model, optimizer, data stream, progress). Returns the
    model and whether the whole curriculum is done."""
    torch.manual_seed(cfg.seed)
    device = torch.device(cfg.device)
    model = LlamaForCausalLM(model_config(tokenizer, cfg)).to(device)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id)
    pool, prose_pool = FillerPool.generated(tokenizer, "train", cfg.seed), None
    pieces = word_pieces(tokenizer)
    started, total_steps, saved, batches, best = time.time(), 0, None, {}, None
    if resume and (out / "pretrain.pt").exists():
        saved = torch.load(out / "pretrain.pt", map_location=device, weights_only=True)
        model.load_state_dict(saved["model"])
        total_steps = saved["steps"]
        if (out / "best.pt").exists():
            best = torch.load(out / "best.pt", map_location=device, weights_only=True)
        log(f"resumed at stage {saved['stage']} step {saved['step']} (finished: {saved['finished']}), "
            f"{total_steps} steps in all")
    bf16 = uses_bf16(device)
    log(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters; pool {len(pool.tokens):,} "
        f"tokens; {'bf16 autocast' if bf16 else 'fp32'}; config {json.dumps(asdict(cfg))}")
    for stage, spec in enumerate(STAGES):
        if saved is not None and (stage < saved["stage"] or (stage == saved["stage"] and saved["finished"])):
            continue
        rng = random.Random(cfg.seed + 1000 * stage)
        if best is not None and best["stage"] != stage:
            best = None  # each stage keeps its own best: validation sets differ between stages
        if spec.prose and prose_pool is None:
            prose_pool = FillerPool.of_paragraphs(tokenizer, prose.paragraphs(prose.MODEL_PACKAGES), cfg.seed)
            log(f"prose pool {len(prose_pool.tokens):,} tokens")
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.01)
        recent, passed_at, first_step, average = [], None, 0, None
        if saved is not None and stage == saved["stage"]:
            rng.setstate((saved["rng"][0], tuple(saved["rng"][1]), saved["rng"][2]))
            optimizer.load_state_dict(saved["optimizer"])
            recent, passed_at, first_step = list(saved["recent"]), saved["passed_at"], saved["step"] + 1
            average = saved.get("average")
        out_of_time = False
        for step in range(first_step, cfg.max_steps_per_stage):
            for group in optimizer.param_groups:
                group["lr"] = (spec.lr or cfg.lr) * min(1.0, (step + 1) / cfg.warmup)
            examples = [stage_example(rng, tokenizer, spec, pool, prose_pool, pieces) for _ in range(spec.batch)]
            ids, labels = (tensor.to(device) for tensor in collate(examples))
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss, right = answer_loss(model, ids, labels)
                accuracy = right[first_asks(examples).to(device)].float().mean().item()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            total_steps += 1
            recent = (recent + [accuracy])[-cfg.window:]
            mean = sum(recent) / len(recent)
            if step % 10 == 0:
                log(f"stage {stage} len {spec.length} step {step} loss {loss.item():.3f} acc {mean:.3f} "
                    f"({ids.numel():,} tokens/batch) elapsed {(time.time() - started) / 60:.1f} min")
            if passed_at is None and len(recent) == cfg.window and mean >= spec.threshold:
                passed_at = step
                log(f"stage {stage} passed at step {step} (acc {mean:.3f})")
            if spec.average_last and passed_at is not None and step - passed_at >= spec.settle - spec.average_last:
                weights = model.state_dict()
                average = ({name: tensor.detach().clone() for name, tensor in weights.items()} if average is None
                           else {name: tensor.mul_(cfg.average_decay).add_(weights[name], alpha=1 - cfg.average_decay)
                                 for name, tensor in average.items()})
            finished = passed_at is not None and step - passed_at >= spec.settle
            finished = finished or step == cfg.max_steps_per_stage - 1
            if finished and average is not None:
                model.load_state_dict(average)
            out_of_time = (time.time() - started) / 60 > cfg.max_minutes
            if spec.keep_best and (step % cfg.validate_every == 0 or finished or out_of_time):
                absent = VALIDATION_ABSENT if spec.absent else 0
                if absent not in batches:
                    batches[absent] = validation_set(tokenizer, cfg.validation_documents, absent=absent)
                scores = validation_accuracy(model, batches[absent], absent)
                score = scores.all
                log(f"stage {stage} step {step} validation {score:.1%}" + (
                    "" if scores.silent is None else
                    f" (stated {scores.stated:.1%}, not stated {scores.silent:.1%})"))
                if best is None or score > best["accuracy"]:
                    best = {"stage": stage, "step": step, "accuracy": score}
                    torch.save({"model": model.state_dict(), **best}, out / "best.pt")
            if finished or out_of_time or step % cfg.checkpoint_every == 0:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "stage": stage,
                            "step": step, "finished": finished, "steps": total_steps, "rng": rng.getstate(),
                            "recent": recent, "passed_at": passed_at, "average": average}, out / "pretrain.pt")
            if finished or out_of_time:
                break
        if out_of_time:
            log("time limit reached; rerun to resume")
            break
    complete = not out_of_time
    if complete and best is not None:
        model.load_state_dict(torch.load(out / "best.pt", map_location=device, weights_only=True)["model"])
        log(f"kept the best validated weights: stage {best['stage']} step {best['step']}, {best['accuracy']:.1%}")
    log(f"pretraining {'done' if complete else 'paused'}: {total_steps} steps, "
        f"{(time.time() - started) / 60:.1f} min this run")
    return model.eval(), complete


def stage_example(rng: random.Random, tokenizer, spec: Stage, pool: FillerPool, prose_pool: FillerPool | None,
                  pieces: tuple[str, ...]) -> Example:
    """One training example of stage `spec`, its filler from `prose_pool` with probability `spec.prose`."""
    if spec.prose and rng.random() < spec.prose:  # no draw at 0: earlier stages' data stay as they were
        pool = prose_pool
    facts = facts_for(rng, "train", spec.facts, 0.3, spec.invented, pieces, spec.possessive)
    return qa_example(rng, tokenizer, pool, spec.length, facts, spec.questions, spec.fragmented, spec.absent,
                      lambda r, stated: absent_question(r, stated, "train", spec.invented, pieces))


def start_from(out: Path, directory: Path, stage: int) -> None:
    """Write OUT/pretrain.pt as the end of the stage before `stage`, with the weights of the model in `directory`
    (a build's OUT/model or the shipped model), so that a resumed run trains from `stage` on."""
    model = LlamaForCausalLM.from_pretrained(directory, dtype=torch.float32)
    torch.save({"model": model.state_dict(), "stage": stage - 1, "step": None, "finished": True, "steps": 0},
               out / "pretrain.pt")


def export_checkpoint(tokenizer, out: Path, cfg: PretrainConfig, directory: Path) -> int:
    """Write the model in OUT/pretrain.pt as a loadable model directory; returns the document length of the stage
    it was at."""
    state = torch.load(out / "pretrain.pt", map_location="cpu", weights_only=True)
    model = LlamaForCausalLM(model_config(tokenizer, cfg))
    model.load_state_dict(state["model"])
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id)
    model.to(torch.bfloat16).save_pretrained(directory)
    tokenizer.save(directory / TIKTOKEN_FILE)
    return STAGES[state["stage"]].length
