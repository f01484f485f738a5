"""Training a reader (`core/answer/reader.py`) on the model's own bounded caches.

Each document is read once, with the session's heads and read settings and no gradient, at a budget that keeps a
share of it drawn from `kept_share` (some documents are kept whole, `uncut_share`, so the full cache does not
suffer). Each read is saved as a `.locret` file under `OUT/reads/`, so the reads, which are most of the cost, are
never run twice. With `min_kept_share`, a question whose value (the document's words its answer states) its read
keeps in too few (layer, KV head) pairs is then skipped, so the reader is not taught to guess what its cache lacks.
Each step then forks one read, puts one of its questions and the answer through the model with the
reader in force, and takes the loss on the answer's tokens: gradients reach the reader through the question's and the
answer's forward only. Checkpoints (`OUT/checkpoint/`) let a stopped run resume.
"""

from __future__ import annotations

import json
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from locret_cli.core.answer.reader import ReaderAdapter, reading_with
from locret_cli.core.measure import peak_memory, reset_peak
from locret_cli.errors import LocretError
from locret_cli.inputs.documents import text_document
from locret_cli.inputs.prompt import conversation_ids, end_of_turn_id
from locret_cli.inputs.tokenizer import encode_text
from locret_cli.models.reader_files import READER_CONFIG, load_reader, save_reader
from locret_cli.training.kept_values import kept_map, value_share

READS = "reads"
CHECKPOINT = "checkpoint"
LOADED_READS = 2  # saved reads held in memory at once: a document's questions are asked one after another


@dataclass
class ReaderConfig:
    steps: int = 2000
    rank: int = 8
    alpha: float = 16.0
    lr: float = 1e-3
    weight_decay: float = 0.0
    clip_norm: float = 1.0
    kept_share: tuple[float, float] = (0.03, 0.25)  # of each document's tokens, drawn uniformly
    uncut_share: float = 0.1  # documents read with a budget they fit in whole
    save_every: int = 100
    seed: int = 0
    min_kept_share: float = 0.0  # skip questions whose value fewer (layer, KV head) pairs keep (`kept_values`)


@dataclass
class ReaderRecord:
    document: str
    questions: list[tuple[str, str]]  # (question, answer)
    budget: int | None = None  # read at this budget, not one drawn from the config's kept share
    values: list[str | None] = field(default_factory=list)  # each question's value, where the data names one


@dataclass
class ReaderStep:
    step: int
    steps: int
    loss: float
    seconds: float


@dataclass
class ReaderSummary:
    steps: int
    seconds: float  # training steps, reads excluded
    reads: int
    read_s: float  # the reads this run made (resumed reads excluded)
    final_loss: float  # mean over the last 50 steps
    peak_bytes: int
    skipped: int = 0  # questions whose value their read keeps too little of (`min_kept_share`)
    config: dict = field(default_factory=dict)


def load_reader_records(path: str | Path) -> list[ReaderRecord]:
    """JSONL records {"document": text, "questions": [{"question": q, "answer": a}, ...]}, optionally with "budget" (the
    entries to read the document at) and, in each question, "value" (the document's words its answer states); a bad
    line is an error naming it."""
    records = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            pairs = [(str(q["question"]), str(q["answer"])) for q in item["questions"]]
            values = [None if q.get("value") is None else str(q["value"]) for q in item["questions"]]
            document, budget = item["document"], item.get("budget")
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise LocretError(f"{path}:{number}: each line needs 'document' and 'questions' of question/answer "
                              f"({type(exc).__name__})") from None
        if not isinstance(document, str) or not document.strip() or not pairs:
            raise LocretError(f"{path}:{number}: an empty document or no questions")
        if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 1):
            raise LocretError(f"{path}:{number}: 'budget' must be a positive whole number of entries")
        if any(value is not None and not value.strip() for value in values):
            raise LocretError(f"{path}:{number}: a question's 'value' is empty")
        records.append(ReaderRecord(document, pairs, budget, values))
    if not records:
        raise LocretError(f"{path} holds no records")
    return records


class ReaderTrainer:
    """Reads `records` with `session` and trains a reader on the reads, in `out`."""

    def __init__(self, session, records: list[ReaderRecord], out: Path, config: ReaderConfig,
                 read: Mapping[str, object] | None = None):
        self.session, self.records, self.out, self.config = session, records, Path(out), config
        self.read = dict(read or {})  # the read settings given, over the model's recorded ones
        self.model, self.tokenizer = session.loaded.model, session.loaded.tokenizer
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)
        torch.manual_seed(config.seed)
        self.reader = ReaderAdapter.for_model(self.model, config.rank, config.alpha).to(self.model.device)
        self.optimizer = torch.optim.AdamW(self.reader.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.end = end_of_turn_id(self.tokenizer, self.model)
        self.step, self.losses, self.read_s, self.reads_made, self.skipped = 0, [], 0.0, 0, 0
        self.loaded: OrderedDict[int, object] = OrderedDict()

    def budget_for(self, index: int, tokens: int) -> int:
        """Record `index`'s budget: its own where it names one, else a share of its `tokens` (whole for an uncut
        one), never below what the settings' stabilizers and the prompt's head need."""
        rng = random.Random(self.config.seed * 1_000_003 + index)
        settings = self.session.plan(read=self.read).read
        wanted = self.records[index].budget
        if not wanted:
            if rng.random() < self.config.uncut_share:
                return tokens + settings.chunk_size
            wanted = 64 * round(rng.uniform(*self.config.kept_share) * tokens / 64)
        return max(2 * settings.stabilizers, wanted)

    def read_path(self, index: int) -> Path:
        return self.out / READS / f"{index:06d}.locret"

    def prepare_reads(self, on_read: Callable[[int, int], None] | None = None) -> None:
        """Read every record not yet read, saving each; `on_read(done, total)` hears each one."""
        from locret_cli.api.saved_context import save_reading

        (self.out / READS).mkdir(parents=True, exist_ok=True)
        for index, record in enumerate(self.records):
            path = self.read_path(index)
            if not path.exists():
                tokens = len(encode_text(self.tokenizer, record.document))
                settings = self.session.plan(read={**self.read, "budget": self.budget_for(index, tokens)}).read
                document = text_document(record.document, f"record {index + 1}")
                started = time.perf_counter()
                reading = self.session.read(document, settings, force=True)
                self.read_s += time.perf_counter() - started
                self.reads_made += 1
                save_reading(reading, path, self.session.heads)
            if on_read:
                on_read(index + 1, len(self.records))

    def skip_unkept(self) -> int:
        """Skip each question whose value its saved read keeps in fewer than `min_kept_share` of the (layer, KV head)
        pairs; a question without a value stays. Returns how many were skipped."""
        if not self.config.min_kept_share:
            return 0
        for index, record in enumerate(self.records):
            if not any(record.values):
                continue
            ids, kept = kept_map(self.read_path(index))
            stay = [i for i, value in enumerate(record.values)
                    if value is None or value_share(self.tokenizer, ids, kept, value) >= self.config.min_kept_share]
            self.skipped += len(record.questions) - len(stay)
            self.records[index] = replace(record, questions=[record.questions[i] for i in stay],
                                          values=[record.values[i] for i in stay])
        if not any(record.questions for record in self.records):
            raise LocretError(f"no question's value is kept in {self.config.min_kept_share} of its read's heads; "
                              "lower the kept share asked for")
        return self.skipped

    def reading(self, index: int):
        """Record `index`'s saved read, loaded (the last LOADED_READS stay in memory)."""
        if index in self.loaded:
            self.loaded.move_to_end(index)
        else:
            self.loaded[index] = self.session.open(str(self.read_path(index)))
            if len(self.loaded) > LOADED_READS:
                self.loaded.popitem(last=False)
        return self.loaded[index]

    def loss(self, index: int, question: str, answer: str) -> torch.Tensor:
        """The mean loss of `answer`'s tokens (and the end of the turn) after `question`, on a fork of record
        `index`'s read, with the reader in force."""
        engine = self.reading(index).engine.fork()
        question_ids = conversation_ids(self.tokenizer, (), question)
        answer_ids = encode_text(self.tokenizer, answer) + [self.end]
        engine.cache.reserve(engine.cache.length() + len(question_ids) + len(answer_ids))
        try:
            with reading_with(self.model, self.reader):
                logits = engine.logits(question_ids + answer_ids, score=False, last=len(answer_ids) + 1)
            return F.cross_entropy(logits[:-1], torch.tensor(answer_ids, device=logits.device))
        finally:
            engine.cache.forget_gradients()

    def pairs(self, epoch: int = 0) -> list[tuple[int, str, str]]:
        """Every (record, question, answer) of one pass over the data: the records in an order drawn from the seed
        and `epoch`, each one's questions together (so its read is loaded once a pass), in an order drawn too."""
        rng = random.Random(self.config.seed * 1_000_003 + epoch)
        order = []
        for index in rng.sample(range(len(self.records)), len(self.records)):
            questions = list(self.records[index].questions)
            rng.shuffle(questions)
            order += [(index, q, a) for q, a in questions]
        return order

    def train(self, on_step: Callable[[ReaderStep], None] | None = None) -> ReaderSummary:
        per_pass, started = sum(len(r.questions) for r in self.records), time.perf_counter()
        reset_peak(self.model.device)
        self.reader.train()
        pairs, epoch = [], -1
        while self.step < self.config.steps:
            if self.step // per_pass != epoch:
                epoch = self.step // per_pass
                pairs = self.pairs(epoch)
            index, question, answer = pairs[self.step % per_pass]
            loss = self.loss(index, question, answer)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.reader.parameters(), self.config.clip_norm)
            self.optimizer.step()
            self.step += 1
            self.losses.append(loss.item())
            if self.step % self.config.save_every == 0 or self.step == self.config.steps:
                self.save_checkpoint()
            if on_step:
                on_step(ReaderStep(self.step, self.config.steps, self.losses[-1], time.perf_counter() - started))
        memory, _ = peak_memory(self.model.device)
        tail = self.losses[-50:]
        return ReaderSummary(self.step, time.perf_counter() - started, len(self.records), self.read_s,
                             sum(tail) / max(len(tail), 1), memory, self.skipped, asdict(self.config))

    def save(self, extra: dict | None = None) -> None:
        """The trained reader, in `out` (`reader.safetensors`, `reader.json`)."""
        save_reader(self.reader, self.out, self.model, {"training": asdict(self.config), **(extra or {})})

    def save_checkpoint(self) -> None:
        directory = self.out / CHECKPOINT
        save_reader(self.reader, directory, self.model)
        torch.save({"optimizer": self.optimizer.state_dict(), "step": self.step, "losses": self.losses},
                   directory / "state.pt")

    def resume(self) -> bool:
        """Continue from the checkpoint in `out`; False when there is none."""
        directory = self.out / CHECKPOINT
        if not (directory / READER_CONFIG).exists():
            return False
        saved = load_reader(directory, self.model)
        with torch.no_grad():
            for mine, theirs in zip(self.reader.parameters(), saved.parameters()):
                mine.copy_(theirs)
        state = torch.load(directory / "state.pt", map_location=self.model.device, weights_only=True)
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.losses = state["step"], list(state["losses"])
        return True
