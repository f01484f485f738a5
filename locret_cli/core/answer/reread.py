"""Locate, then re-read: a small model answers from a few windows of the original text read with a full cache.

A bounded cache keeps scattered high-scoring entries, which a small model reads badly. So an answer can come in two
passes: the first asks the bounded cache, and the attention its first tokens pay to the kept entries (as citations
measure it) names where in the document it looked; the second reads the `reread` windows of `reread_tokens`
tokens around those places again, whole, with a full cache, and answers from them. Memory stays bounded by the
budget plus the windows.

Located by the question's words alone (`locate` words or bm25), an answer never reads the bounded cache. A Reading
then runs its bounded read only when an answer needs it (`Session.read(defer=True)`): when no window is found
(`routes.LocatedWindows`).

With `hops` 2, a fact that needs two places ("Who holds the key of the room where the choir meets?") gets a second
pass: the first answer's own rarer words ("The choir meets in room 12.") locate further windows outside the first
ones, and the question is answered again from all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from locret_cli.core.answer.answerable import answerable_share
from locret_cli.core.answer.citations import AttentionTally
from locret_cli.core.answer.locate import attention_per_token, best_windows, question_words_per_token
from locret_cli.core.answer.passage_rank import best_passages, passage_scores, passage_signal
from locret_cli.core.engine import Engine, Generation
from locret_cli.inputs.document_numbers import DocumentNumbers
from locret_cli.inputs.sources import Source, SourceMap, TokenChunk, top_sources, units_best
from locret_cli.inputs.tokenizer import encode_text
from locret_cli.settings import AnswerSettings

PROBE_TOKENS = 16  # the first pass's answer is cut here: its attention is what locates
SEPARATOR = "\n\n[...]\n\n"  # between windows, where text was left out


@dataclass
class Window:
    """A stretch of the document read again: token indices [first, end) of the input, and its pages or lines."""

    first: int
    end: int
    label: str
    hop: int = 1  # 2: located by the first answer's words (`hops` 2)

    def to_json(self) -> dict:
        return {"first_token": self.first, "end_token": self.end, "label": self.label, "hop": self.hop}


@dataclass
class WindowAnswer:
    """The second pass: its generation, the windows it read, the sources (the pages or lines inside the windows where
    the locating signal was strongest), and its engine."""

    generation: Generation
    windows: list[Window]
    sources: list[Source] | None
    engine: Engine
    extra_s: float  # before the second pass's question: locating (a probe answer), reading the windows, the check
    answerable: float | None = None  # the model's share of yes, asked whether the windows answer (None: not asked)


def locate(reader: Engine, tokenizer, input_ids: torch.Tensor, pinned: int, question: str, question_ids: list[int],
           answering: AnswerSettings,
           numbers: DocumentNumbers | None = None) -> tuple[list[tuple[int, int]], torch.Tensor, float]:
    """The windows of the input to read again for `question` (`question_ids`: in its chat layout), the signal per
    token index that named them, and how long finding them took. `locate` "attention": where a probe answer on a
    fork of `reader` looked among the kept entries; "words": where the question's rarer tokens occur in the whole
    input; "both": the two, each as shares of its own total, added; "bm25": centred on the passages that best match
    the question's words (`passage_rank.py`)."""
    started = reader.clock()
    if answering.locate == "bm25":
        scores, spans = passage_scores(tokenizer, input_ids, question, pinned, answering.reread_tokens)
        windows = best_passages(scores, spans, answering.reread, answering.reread_tokens, pinned, len(input_ids))
        return windows, passage_signal(scores, spans, len(input_ids)), reader.clock() - started
    signals, probe_s = [], 0.0
    if answering.locate in ("attention", "both"):
        probe = reader.fork(replace(answering, max_new_tokens=min(PROBE_TOKENS, answering.max_new_tokens)))
        tally = AttentionTally(len(probe.cache.layers), reader.kept_tokens)
        generation = probe.answer(question_ids, tally=tally, numbers=numbers)
        origins, weights = tally.origin_weights(reader.cache, probe.cache)
        signals.append(attention_per_token(origins, weights, len(input_ids), pinned))
        probe_s = generation.time_to_first_token_s + generation.decode_s
    if answering.locate in ("words", "both"):
        signals.append(question_words_per_token(input_ids, encode_text(tokenizer, question), pinned))
    per_token = sum(signal / signal.sum() for signal in signals if signal.sum() > 0)
    if not isinstance(per_token, torch.Tensor):
        return [], torch.zeros(len(input_ids), dtype=torch.float64), probe_s
    return best_windows(per_token, answering.reread, answering.reread_tokens, pinned), per_token, probe_s


def answer_from_windows(reader: Engine, tokenizer, input_ids: torch.Tensor, source_map: SourceMap, question: str,
                        question_ids: list[int], answering: AnswerSettings, sources: int, on_token=None,
                        numbers: DocumentNumbers | None = None,
                        check_ids: list[int] | None = None) -> WindowAnswer | None:
    """Answer `question_ids` from the windows `locate` names, read whole after the prompt's head (with `hops` 2,
    then from those and the windows the first answer's words locate); None when nothing names a window (then the
    bounded cache answers). `numbers` are the document's, for `numbers_from_document`; `check_ids`, if given, the
    question with `answerable.ANSWERABLE`, asked of the windows read before the answer."""
    pinned = reader.pinned
    spans, signal, locate_s = locate(reader, tokenizer, input_ids, pinned, question, question_ids, answering,
                                     numbers)
    if not spans:
        return None
    hops = [1] * len(spans)
    two = answering.hops > 1
    generation, engine, read_s, share = read_and_answer(reader, tokenizer, input_ids, spans, question_ids,
                                                        answering, None if two else on_token, numbers,
                                                        None if two else check_ids)
    extra_s = locate_s + read_s
    if two:
        found = second_hop(tokenizer, input_ids, pinned, spans, generation.token_ids, answering)
        extra_s += generation.time_to_first_token_s + generation.decode_s
        spans, hops = merged(spans, found)
        generation, engine, read_s, share = read_and_answer(reader, tokenizer, input_ids, spans, question_ids,
                                                            answering, on_token, numbers, check_ids)
        extra_s += read_s
    windows = [Window(first, end, window_label(source_map, first, end), hop) for (first, end), hop in
               zip(spans, hops)]
    cited = None
    if sources > 0:  # in a window read whole, the answer's attention goes to the window's first lines as to sinks
        inside = torch.zeros(len(signal), dtype=torch.bool)
        for first, end in spans:
            inside[first:end] = True
        cited = top_sources(source_map, units_best(source_map, signal * inside), sources)
    return WindowAnswer(generation, windows, cited, engine, extra_s, share)


def second_hop(tokenizer, input_ids: torch.Tensor, pinned: int, spans: list[tuple[int, int]], answer_ids: list[int],
               answering: AnswerSettings) -> list[tuple[int, int]]:
    """Windows, outside `spans`, where the rarer words of a first answer (`answer_ids`) occur."""
    words = encode_text(tokenizer, tokenizer.decode(answer_ids, skip_special_tokens=True))
    if not words:
        return []
    signal = question_words_per_token(input_ids, words, pinned)
    for first, end in spans:
        signal[first:end] = 0
    return best_windows(signal, answering.reread, answering.reread_tokens, pinned)


def merged(first: list[tuple[int, int]], second: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], list[int]]:
    """The windows of both hops in document order, overlapping ones joined; each with its hop (1 when it holds a
    first-hop window)."""
    joined: list[list[int]] = []
    for start, end, hop in sorted([(f, e, 1) for f, e in first] + [(f, e, 2) for f, e in second]):
        if joined and start <= joined[-1][1]:
            joined[-1][1], joined[-1][2] = max(joined[-1][1], end), min(joined[-1][2], hop)
        else:
            joined.append([start, end, hop])
    return [(f, e) for f, e, _ in joined], [h for _, _, h in joined]


def read_windows(reader: Engine, tokenizer, input_ids: torch.Tensor, spans: list[tuple[int, int]],
                 answering: AnswerSettings, lead_ids: Sequence[int] = ()) -> tuple[Engine, float]:
    """An engine that has read the prompt's head (then `lead_ids`, where given) and the windows `spans` whole, with
    a full cache (`Engine.over_text`), ready for a question; (the engine, how long reading the windows took)."""
    separator = encode_text(tokenizer, SEPARATOR)
    ids = input_ids[:reader.pinned].tolist() + list(lead_ids)
    for first, end in spans:
        ids += separator + input_ids[first:end].tolist()
    ids += separator
    engine = reader.over_text(len(ids), answering)
    size, started = engine.settings.chunk_size, engine.clock()
    engine.read(TokenChunk(ids[i:i + size], None, None, 0) for i in range(0, len(ids), size))
    return engine, engine.clock() - started


def read_and_answer(reader: Engine, tokenizer, input_ids: torch.Tensor, spans: list[tuple[int, int]],
                    question_ids: list[int], answering: AnswerSettings, on_token=None,
                    numbers: DocumentNumbers | None = None,
                    check_ids: list[int] | None = None) -> tuple[Generation, Engine, float, float | None]:
    """`read_windows`, then answer; (the generation, its engine, how long reading the windows and the check took, and
    the model's share of yes to `check_ids` asked on a fork before the answer, None when not given)."""
    engine, read_s = read_windows(reader, tokenizer, input_ids, spans, answering)
    share = None
    if check_ids:
        started = engine.clock()
        share = answerable_share(engine, tokenizer, check_ids)
        read_s += engine.clock() - started
    return engine.answer(question_ids, on_token=on_token, numbers=numbers), engine, read_s, share


def window_label(source_map: SourceMap, first: int, end: int) -> str:
    """The pages or lines a window of token indices covers: "p. 9-10", "lines 120-160"."""
    units = source_map.unit_of(torch.tensor([first, end - 1])).clamp(min=0).tolist()
    low, high = source_map.source(units[0], 0.0), source_map.source(units[1], 0.0)
    if low.page is not None:
        return f"p. {low.page}" if low.page == high.page else f"p. {low.page}-{high.page}"
    return f"lines {low.first_line}-{high.last_line}"
