"""Training retaining heads on a frozen model.

Each step takes one example: the frozen model runs once on its prompt and answer with the same q/k/v hooks inference
uses; as each layer's attention runs, its labels are taken from the answer's queries, its head predicts scores for
the prompt's tokens, the loss SmoothL1(pred, label) + α·MSE(pred[k], pred[k-1]) is taken, and its gradient flows into
that head at once, so only one layer's activations are alive at a time.
AdamW with linear warmup then linear decay, gradient values clipped. Data order depends only on the seed and the
step, so a resumed run continues exactly where an uninterrupted one would be.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from locret_cli.core.attention.capture import capture_qkv
from locret_cli.core.attention.probe import observe_attention
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.measure import peak_memory, reset_peak
from locret_cli.core.transformers_internals import decoder_stack
from locret_cli.errors import SettingError
from locret_cli.models.heads_files import HEADS_CONFIG, load_heads, save_heads
from locret_cli.models.loading import resolve_dtype
from locret_cli.training.data import TokenizedExample
from locret_cli.training.labels import answer_to_prompt_max

CHECKPOINTS = "checkpoints"


@dataclass
class TrainConfig:
    steps: int = 3000
    lr: float = 5e-4
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.01
    warmup: int | None = None  # None: 5% of steps
    clip_value: float = 0.5
    smooth_weight: float = 0.0025
    rank_weight: float = 0.0  # 0: the paper's loss; > 0 adds β·rank_loss, which weighs the top of the ranking
    keep_weight: float = 0.0  # > 0 adds γ·keep_loss on examples whose data name passages to keep
    keep_against: float = 0.01  # keep_loss sets kept tokens against this top share of the other tokens
    hidden: int = 1024
    save_every: int = 500
    eval_fraction: float = 0.05
    seed: int = 0


@dataclass
class StepReport:
    step: int
    steps: int
    loss: float  # SmoothL1, plus rank_weight · rank_loss and keep_weight · keep_loss
    smooth: float
    accuracy: float  # top-10% overlap, mean over layers and KV heads
    tokens_per_s: float


@dataclass
class TrainSummary:
    steps: int
    seconds: float
    peak_bytes: int
    peak_device: str
    final_loss: float
    final_smooth: float
    heldout_accuracy: float
    heldout_per_layer: list[float]
    heldout_examples: int
    train_examples: int
    config: dict = field(default_factory=dict)


def top_overlap(pred: torch.Tensor, target: torch.Tensor, fraction: float = 0.1) -> float:
    """Share of the target's top `fraction` tokens that are also in the prediction's, per KV head, averaged.

    pred, target: (T, kv_heads)."""
    k = max(1, math.ceil(fraction * pred.shape[0]))
    chosen = torch.zeros_like(pred, dtype=torch.bool).scatter_(0, pred.topk(k, dim=0).indices, True)
    wanted = target.topk(k, dim=0).indices
    return float(chosen.gather(0, wanted).float().mean())


def rank_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """KL divergence from softmax(target) to softmax(pred) over the prompt's tokens, per KV head, averaged.

    The labels are pre-softmax scores, so softmax(target) is where the answer's strongest query looks: nearly all of
    its mass lies on the few top-labelled tokens. The term is small when the prediction puts those tokens on top of
    its own ranking, whatever it predicts for the rest, which SmoothL1 weighs alike. pred, target: (T, kv_heads)."""
    return F.kl_div(pred.log_softmax(0), target.log_softmax(0), log_target=True, reduction="sum") / pred.shape[1]


def keep_loss(pred: torch.Tensor, keep: torch.Tensor, against: float) -> torch.Tensor:
    """Mean softplus(pred[j] − pred[i]) over kept tokens i, the top `against` share j of the other tokens by pred,
    and KV heads: small when every kept token outscores the others' top, which is what a bounded cache keeps.

    The labels come from one question's answer, so they cannot say that a statement another question would ask must
    stay too; data that know it name it (`data.Record.keep`). pred: (T, kv_heads); keep: (K,) indices into T."""
    others = torch.ones(pred.shape[0], dtype=torch.bool, device=pred.device)
    others[keep] = False
    rest = pred[others]
    hardest = rest.topk(max(1, math.ceil(against * rest.shape[0])), dim=0).values  # (k, kv_heads)
    return F.softplus(hardest[None] - pred[keep][:, None]).mean()


class HeadTrainer:
    """Trains heads (float32) for the frozen `model` on tokenized examples: new ones of `config.hidden`, or `start`
    (trained heads to go on from)."""

    def __init__(self, model, examples: list[TokenizedExample], out: Path, config: TrainConfig,
                 start: RetainingHeads | None = None):
        if config.steps <= 0:
            raise SettingError("{steps} must be positive")
        self.model, self.examples, self.out, self.config = model, examples, out, config
        order = list(range(len(examples)))
        random.Random(config.seed).shuffle(order)
        held = max(1, round(config.eval_fraction * len(order))) if len(order) >= 2 else 0
        self.heldout, self.train_order = order[:held], order[held:] or order
        self._epoch, self._order = -1, []
        torch.manual_seed(config.seed)
        self.warmup = config.warmup if config.warmup is not None else max(1, config.steps // 20)
        self.step = 0
        self.last_loss = self.last_smooth = float("nan")  # of the latest step, kept in checkpoints
        self.fast_bf16 = resolve_dtype("auto", model.device) == torch.bfloat16
        heads = start if start is not None else RetainingHeads.for_model(model, config.hidden)
        self._optimise(heads.float().to(model.device))

    def _optimise(self, heads: RetainingHeads) -> None:
        """Train `heads` from here on with a fresh AdamW and warmup-then-decay schedule."""
        self.heads = heads
        self.optimizer = torch.optim.AdamW(heads.parameters(), lr=self.config.lr, betas=self.config.betas,
                                           weight_decay=self.config.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self.lr_factor)

    def lr_factor(self, step: int) -> float:
        steps, warmup = self.config.steps, self.warmup
        return min((step + 1) / warmup, max(0.0, (steps - step) / max(1, steps - warmup)))

    def example_at(self, step: int) -> int:
        """The training example of `step`: each epoch is a seeded shuffle of the training split."""
        epoch, offset = divmod(step, len(self.train_order))
        if self._epoch != epoch:
            self._epoch, self._order = epoch, list(self.train_order)
            random.Random(self.config.seed * 1_000_003 + epoch).shuffle(self._order)
        return self._order[offset]

    def run_example(self, index: int, train: bool) -> tuple[float, float, list[float]]:
        """One frozen forward over example `index`'s prompt and answer; returns (loss, smooth, per-layer overlap).

        The same forward gives each layer's head its input (the prompt's pre-RoPE q, k, v, from the capture hooks)
        and its labels (the answer's queries against the prompt's keys, from inside attention, which runs after the
        layer's projections): no separate label pass, nothing cached between steps.
        """
        example = self.examples[index]
        prompt_length = len(example.prompt_ids)
        layers = len(self.heads.layers)
        fits, smooths, overlaps = [0.0] * layers, [0.0] * layers, [0.0] * layers
        inputs: dict[int, torch.Tensor] = {}
        keep = torch.tensor(example.keep, device=self.model.device) if example.keep else None

        def on_qkv(layer_idx, q, k, v):
            inputs[layer_idx] = torch.cat((q[0, :prompt_length], k[0, :prompt_length], v[0, :prompt_length]), dim=-1)

        def on_attention(layer_idx, query, key, scaling):
            target = answer_to_prompt_max(query, key, prompt_length, scaling).T  # (prompt_length, kv_heads)
            autocast = self.autocast()
            with torch.enable_grad() if train else nullcontext(), autocast or nullcontext():
                x = inputs.pop(layer_idx)
                pred = self.heads.layers[layer_idx](x if autocast else x.float()).float()
                fit = F.smooth_l1_loss(pred, target)
                smooth = F.mse_loss(pred[1:], pred[:-1]) if pred.shape[0] > 1 else pred.sum() * 0
                if self.config.rank_weight:
                    fit = fit + self.config.rank_weight * rank_loss(pred, target)
                if self.config.keep_weight and keep is not None:
                    fit = fit + self.config.keep_weight * keep_loss(pred, keep, self.config.keep_against)
                if train:
                    ((fit + self.config.smooth_weight * smooth) / layers).backward()
            fits[layer_idx], smooths[layer_idx] = fit.item(), smooth.item()
            overlaps[layer_idx] = top_overlap(pred.detach(), target)

        ids = torch.tensor([example.prompt_ids + example.answer_ids], device=self.model.device)
        with torch.no_grad(), capture_qkv(self.model, on_qkv), observe_attention(self.model, on_attention):
            decoder_stack(self.model)(input_ids=ids)
        return sum(fits) / layers, sum(smooths) / layers, overlaps

    def autocast(self) -> torch.autocast | None:
        """Heads keep float32 weights and compute in bf16 where bf16 is fast (CUDA; CPUs where the dtype probe
        chose bf16; docs/measurements/training.md measures it); None where they compute in float32."""
        if self.fast_bf16:
            return torch.autocast(self.model.device.type, dtype=torch.bfloat16)
        return None

    def train(self, on_step: Callable[[StepReport], None] | None = None) -> TrainSummary:
        reset_peak(self.model.device)
        started = time.perf_counter()
        tokens = 0
        while self.step < self.config.steps:
            index = self.example_at(self.step)
            self.last_loss, self.last_smooth, overlaps = self.run_example(index, train=True)
            torch.nn.utils.clip_grad_value_(self.heads.parameters(), self.config.clip_value)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.scheduler.step()
            self.step += 1
            tokens += len(self.examples[index].prompt_ids)
            if self.step % self.config.save_every == 0 or self.step == self.config.steps:
                self.save_checkpoint()
            if on_step:
                elapsed = time.perf_counter() - started
                on_step(StepReport(self.step, self.config.steps, self.last_loss, self.last_smooth,
                                   sum(overlaps) / len(overlaps),
                                   tokens / elapsed))
        per_layer = self.evaluate()
        memory, device = peak_memory(self.model.device)
        return TrainSummary(
            steps=self.step, seconds=time.perf_counter() - started, peak_bytes=memory, peak_device=device,
            final_loss=self.last_loss, final_smooth=self.last_smooth,
            heldout_accuracy=sum(per_layer) / len(per_layer),
            heldout_per_layer=per_layer, heldout_examples=len(self.heldout), train_examples=len(self.train_order),
            config=asdict(self.config),
        )

    def evaluate(self) -> list[float]:
        """Top-10% overlap per layer over the held-out split (the training split if nothing was held out)."""
        indices = self.heldout or self.train_order
        totals = [0.0] * len(self.heads.layers)
        for index in indices:
            _, _, overlaps = self.run_example(index, train=False)
            totals = [t + o for t, o in zip(totals, overlaps)]
        return [t / len(indices) for t in totals]

    def save_checkpoint(self) -> None:
        directory = self.out / CHECKPOINTS / f"step-{self.step:07d}"
        save_heads(self.heads, directory)
        state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(), "step": self.step,
                 "loss": self.last_loss, "smooth": self.last_smooth}
        torch.save(state, directory / "state.pt")
        for old in sorted((self.out / CHECKPOINTS).glob("step-*"))[:-2]:
            for file in old.iterdir():
                file.unlink()
            old.rmdir()

    def resume(self) -> bool:
        """Continue from the newest checkpoint in `out`; False when there is none."""
        found = sorted((self.out / CHECKPOINTS).glob("step-*"))
        if not found:
            return False
        latest = found[-1]
        self._optimise(load_heads(latest, self.model, dtype=torch.float32))
        state = torch.load(latest / "state.pt", map_location=self.model.device, weights_only=True)
        self.optimizer.load_state_dict(state["optimizer"])  # after the scheduler, which resets the lr it finds
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = state["step"]
        self.last_loss, self.last_smooth = state.get("loss", float("nan")), state.get("smooth", float("nan"))
        return True


def check_output(out: Path, resume: bool, overwrite: bool, marker: str = HEADS_CONFIG,
                 what: str = "trained heads") -> None:
    """Never replace what a finished run left in `out` (its `marker` file: heads, or a reader) unless asked."""
    if (out / marker).exists() and not (resume or overwrite):
        raise SettingError("{out} already holds " + what + "; pass {overwrite} to replace that run, or {resume}",
                           out=out)
