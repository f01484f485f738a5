"""Checking an answer against the document's own text.

An answer's specific content is what it says that the question did not: runs of its words that are neither in the
question nor common English, such as numbers, codes, names and quoted phrases ("According to the passage," is
where the model read, not content). Each run is looked up in the document's words (case and punctuation ignored; a
dotted or slashed name's parts occur where it does: "WrongPasswordError" in "pypdf.errors.WrongPasswordError"):

- found: every run occurs in the document as written (its words in that order), with more than half of the
  question's own specific words within ANCHOR_WORDS words of it (so "4821" counts for "the gate code of the north
  depot" only where the gate code and the north depot are named, not beside another place's gate code);
- partial: every specific word occurs somewhere, but some run only far from what the question names, or only as
  scattered words, never together; or the question names something the document never does ("the Ardent quarry"),
  so the answer, whatever it holds, is not about anything the document says;
- not_found: some specific word occurs nowhere in the document;
- n/a: the answer has no specific content (it only restates the question, or says nothing new).

A run found near what the question names counts only where it is **bound** to it (`binding.py`): in a sentence that
names the question as fully as any sentence of the document, with the answer's polarity. So a neighbour's value
("7762", the north depot's radio channel, asked its gate code) is partial, and so is a value from a sentence that
denies what the answer asserts. An answer that offers several candidates ("4821 or 7762") is partial too. A yes or no
to a polar question ("Was the annual meeting held in 1999?") is found where one sentence states the question's claim
with the answer's polarity.

A found answer is also **stated** when some sentence of the document holds each of its runs together with every
specific word of the question ("4821" in "The gate code of the north depot is 4821."), not merely near them.

This is lexical: an answer that copies the document's words in a wrong sentence ("the gate code is the harbour
master", where the document names a harbour master) is found. What it catches is content the document does not
hold: a made-up number, a name from nowhere, a babbled phrase.

    text = DocumentText(["page one text", "page two text"], ["p. 1", "p. 2"])
    ground("What is the gate code?", "The gate code is 4821.", text).status
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field

from locret_cli.checks.binding import ANSWER_KINDS, Claims, is_polar, negated, polarity, variants

WORD = re.compile(r"[^\W_]+(?:['’.,:/-][^\W_]+)*")  # 4821, A-17, 3.14, 12:30, O'Neill, 1,024
THOUSANDS = re.compile(r"(?<=\d)[,’'](?=\d{3}(?!\d))")  # the separators in 4,821 and 1'000'000
POSSESSIVE = re.compile(r"['’]s$")
CLAUSE_END = re.compile(r"[.!?;:,]\s|[.!?;:,]$|\n|[()\[\]]")
SENTENCE_END = re.compile(r"(?<=[.!?])[\"”')\]]*\s+|\n\s*\n")  # where a document's sentence ends
CLAUSE_BREAK = re.compile(r"(?<=[,;:])\s+|\s+(?=(?:and|but|while|whereas)\s)", re.IGNORECASE)  # within a sentence
PARTED = re.compile(r"(?<=[^\W\d_])[./:](?=[^\W\d_])")  # a dotted or slashed name's joins: not 3.14, 12:30
QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”')
LARGEST_GAP = 2  # common words a run may hold between two specific ones ("Lord Ashby in 1820")
ANCHOR_WORDS = 30  # a span is found only where most of the question's own specific words are this close
PLACES_SHOWN = 3
REFUSAL = "The document does not say."  # what a strict answer says in place of content the document does not hold
COMMON = frozenset("""
a about above after again against all also am an and any are as at be because been before being below between both but
by can could did do does doing done down during each either else even ever every few for from further had has have
having he her here hers herself him himself his how however i if in into is it its itself just least less like may me
might more most much must my myself neither no nor not now of off on once only or other our ours ourselves out over own
per rather same shall she should since so some such than that the their theirs them themselves then there these they
this those though through thus to too under until up upon us very via was we were what when where whether which while
who whom whose why will with within without would yet you your yours yourself yourselves
answer answers document documents text texts question questions says said say stated states state mentioned mention
given called named known according
""".split())
SPECIAL = re.compile(r"<\|?[^<>\s]{1,40}?\|?>")  # chat-template markers left in an answer: never content
SOURCE = r"(?:passage|text|essay|article|document|documentation|docstring|excerpt|context|author|information)"
FRAME = re.compile(rf"^\s*(?:(?:according to|as (?:stated|described|mentioned|given) in|in|from) (?:the|this) {SOURCE}"
                   rf"|based on (?:the |this )?{SOURCE}(?: (?:provided|given))?(?: in (?:the|this) {SOURCE})?)\b,?",
                   re.IGNORECASE)  # "According to the passage, ...": where the model says it read, not content


@dataclass
class Span:
    """One run of the answer's specific content and where the document holds it."""

    text: str
    status: str  # "found"; "unbound" (near what the question names, but said of something else there, or with the
    # other polarity); "elsewhere" (only far from what the question names); "scattered" (its words occur, not
    # together); "missing" (some word occurs nowhere); for a polar answer's claim, "contradicted"
    places: list[str] = field(default_factory=list)  # pages or line ranges where it occurs, first few
    units: list[int] = field(default_factory=list)  # the same, as unit indices
    stated: bool = False  # some sentence holds it with every specific word of the question

    def to_json(self) -> dict:
        return {"text": self.text, "status": self.status, "places": self.places}


@dataclass
class Grounding:
    """Whether an answer's specific content is in the document: status and the spans checked."""

    status: str  # "found", "partial", "not_found" or "n/a"
    spans: list[Span] = field(default_factory=list)
    unnamed: list[str] = field(default_factory=list)  # the question's specific words the document never names

    @property
    def grounded(self) -> bool:
        """True unless some of the answer's content is not in the document as written."""
        return self.status in ("found", "n/a")

    @property
    def stated(self) -> bool:
        """Found, and every span in a sentence that names all the question's specific words."""
        return self.status == "found" and all(span.stated for span in self.spans)

    @property
    def level(self) -> int:
        """How well the document backs the answer: 2 stated, 1 found, 0 otherwise."""
        return 2 if self.stated else 1 if self.status == "found" else 0

    def missing(self) -> list[str]:
        """What the document does not hold as the answer says it: spans not found, and the question's words it never
        names."""
        return [span.text for span in self.spans if span.status != "found"] + self.unnamed

    def units(self) -> list[int]:
        """The units that hold the answer's found spans, in the order found."""
        return list(dict.fromkeys(unit for span in self.spans for unit in span.units))

    def to_json(self) -> dict:
        return {"status": self.status, "spans": [span.to_json() for span in self.spans],
                "question_words_not_in_document": self.unnamed}


def words(text: str) -> list[str]:
    """The lowercased words of `text`, as grounding compares them: "4,821" is "4821" and "Halvorsen's" is
    "halvorsen"."""
    return [POSSESSIVE.sub("", w.lower()) for w in WORD.findall(THOUSANDS.sub("", text))]


class DocumentText:
    """A document's words, unit by unit (pages or line ranges), indexed for phrase lookup."""

    def __init__(self, unit_texts: list[str], labels: list[str]):
        self.labels = labels
        self.words: list[str] = []
        self.unit_starts: list[int] = []  # the index in `words` of each unit's first word
        self.sentence_starts: list[int] = []  # the index in `words` of each sentence's first word
        self.clause_starts: list[int] = []  # ... of each clause's (parted by , ; : and, but, while, whereas)
        self.scope_starts: list[int] = []  # ... of each span a negation reaches over (a sentence, parted by ; : but)
        for text in unit_texts:
            self.unit_starts.append(len(self.words))
            for sentence in SENTENCE_END.split(text):
                self.sentence_starts.append(len(self.words))
                self.scope_starts.append(len(self.words))
                self._add_clauses(sentence)
        self.char_starts, at = [], 0  # where each word begins in `joined`
        for word in self.words:
            self.char_starts.append(at)
            at += len(word) + 1
        self.joined = " ".join(self.words) + " "
        self.where: dict[str, list[int]] = {}
        for index, word in enumerate(self.words):
            self.where.setdefault(word, []).append(index)
            for part in set(PARTED.split(word)) - {word}:  # "wrongpassworderror" of "pypdf.errors.wrongpassworderror"
                self.where.setdefault(part, []).append(index)

    def _add_clauses(self, sentence: str) -> None:
        at = 0
        for mark in [*CLAUSE_BREAK.finditer(sentence), None]:
            self.clause_starts.append(len(self.words))
            self.words += words(sentence[at:None if mark is None else mark.start()])
            if mark is not None:
                at = mark.end()
                if sentence[mark.start() - 1] in ";:" or sentence[at:at + 4].lower() == "but ":
                    self.scope_starts.append(len(self.words))

    def holds(self, word: str) -> bool:
        """Whether the document writes `word` anywhere: as it is, in one of its `variants`, or, for a dotted or
        slashed name, each of its parts."""
        if any(form in self.where for form in variants(word)):
            return True
        parts = PARTED.split(word)
        return len(parts) > 1 and all(part in self.where for part in parts)

    def occurrences(self, phrase: list[str]) -> list[int]:
        """The word indices where the words `phrase` occur in order."""
        if len(phrase) == 1:
            return self.where.get(phrase[0], [])
        needle, found, at = " ".join(phrase) + " ", [], 0
        while (at := self.joined.find(needle, at)) >= 0:
            index = bisect_right(self.char_starts, at) - 1
            if self.char_starts[index] == at:  # on a word's start, not inside one
                found.append(index)
            at += 1
        return found

    def unit_of(self, index: int) -> int:
        return max(bisect_right(self.unit_starts, index) - 1, 0)

    def sentence_of(self, index: int) -> int:
        return max(bisect_right(self.sentence_starts, index) - 1, 0)

    def clause_of(self, index: int) -> int:
        return max(bisect_right(self.clause_starts, index) - 1, 0)

    def clause_span(self, clause: int) -> range:
        """The word indices of one clause."""
        end = self.clause_starts[clause + 1] if clause + 1 < len(self.clause_starts) else len(self.words)
        return range(self.clause_starts[clause], end)

    def scope_start(self, index: int) -> int:
        """Where the span a negation before word `index` could reach over begins."""
        return self.scope_starts[max(bisect_right(self.scope_starts, index) - 1, 0)]

    def sentence_words(self, sentence: int) -> list[str]:
        end = self.sentence_starts[sentence + 1] if sentence + 1 < len(self.sentence_starts) else len(self.words)
        return self.words[self.sentence_starts[sentence]:end]

    def near(self, index: int, length: int, word: str) -> bool:
        """Whether `word` occurs within ANCHOR_WORDS words of words index..index+length-1."""
        places = self.where.get(word, [])
        first = bisect_right(places, index - ANCHOR_WORDS - 1)
        return first < len(places) and places[first] <= index + length + ANCHOR_WORDS

    def states(self, index: int, length: int, asked: list[str]) -> bool:
        """Whether the sentences holding words index..index+length-1 hold every word `asked` (False for none)."""
        first = bisect_right(self.sentence_starts, index) - 1
        last = bisect_right(self.sentence_starts, index + length - 1)
        end = self.sentence_starts[last] if last < len(self.sentence_starts) else len(self.words)
        return bool(asked) and set(asked) <= set(self.words[self.sentence_starts[first]:end])

    def anchored(self, index: int, length: int, asked: list[str]) -> bool:
        """Whether more than half of the words `asked` occur near words index..index+length-1 (True for none)."""
        return 2 * sum(self.near(index, length, word) for word in asked) > len(asked) if asked else True


def specific_runs(answer: str, question: str) -> list[list[str]]:
    """The answer's specific content as runs of words: quoted phrases whole, then, clause by clause, runs of words
    that are neither the question's nor common, holding at most LARGEST_GAP other words between two of them."""
    answer = FRAME.sub(" ", SPECIAL.sub(" ", answer))
    asked = set(words(question))
    runs = [words(a or b) for a, b in QUOTED.findall(answer)]
    for clause in CLAUSE_END.split(QUOTED.sub(" ", answer)):
        clause_words = words(clause)
        marks = [i for i, w in enumerate(clause_words) if w not in asked and w not in COMMON]
        run: list[int] = []
        for i in marks:
            if run and i - run[-1] - 1 > LARGEST_GAP:
                runs.append(clause_words[run[0]:run[-1] + 1])
                run = []
            run.append(i)
        if run:
            runs.append(clause_words[run[0]:run[-1] + 1])
    return [run for run in runs if run]


def ground(question: str, answer: str, text: DocumentText, cut: bool = False) -> Grounding:
    """Check `answer`'s specific content against `text` (see the module docstring). An answer `cut` short by the
    token limit may end inside a word ("... is 48" of 4821): its last word is not checked, unless it ends a
    sentence."""
    answer = answer.rstrip()
    if cut and not answer.endswith((".", "!", "?", '"', "”")):  # a finished sentence was not cut inside a word
        answer = answer[: max(answer.rfind(" "), answer.rfind("\n"), 0)]
    question_words = words(SPECIAL.sub(" ", question))
    asked = [w for w in dict.fromkeys(question_words) if w not in COMMON]
    named = [w for w in asked if any(form in text.where for form in variants(w))]
    claims = Claims(text, named, COMMON)
    answer_words = words(SPECIAL.sub(" ", answer))
    yes = polarity(answer_words) if is_polar(question_words) else None
    if yes is not None:  # the yes or no is the answer's stance, not content to look up
        answer = SPECIAL.sub(" ", answer)
        answer = answer[WORD.search(answer).end():]
    spans = [claim_span(claims, yes, text)] if yes is not None else []
    runs = specific_runs(answer, question)
    for run in runs:
        spans.append(run_span(run, text, claims, negated(answer_words)))
    if not spans:
        return Grounding("n/a")
    unnamed = [w for w in asked if w not in named and w not in ANSWER_KINDS]
    statuses = {span.status for span in spans}
    several = len([s for s in spans if s.status != "missing"]) > 1 and bool({"or", "either"} & set(answer_words))
    status = "not_found" if "missing" in statuses else (
        "found" if statuses == {"found"} and not unnamed and not several else "partial")
    return Grounding(status, spans, unnamed)


def run_span(run: list[str], text: DocumentText, claims: Claims, answer_negated: bool) -> Span:
    """Where the document holds one run of the answer's content, and whether it is bound to the question there."""
    found = text.occurrences(run)
    anchored = [i for i in found if text.anchored(i, len(run), claims.asked)]
    bound = [i for i in anchored if claims.bound(i, len(run), answer_negated)]
    if bound:
        status = "found"
    elif anchored:
        status = "unbound"
    elif found:
        status = "elsewhere"
    else:
        content = [w for w in run if w not in COMMON]
        status = "scattered" if all(text.holds(w) for w in content) else "missing"
    units = list(dict.fromkeys(text.unit_of(i) for i in bound))[:PLACES_SHOWN]
    stated = any(text.states(i, len(run), claims.asked) for i in bound)
    return Span(" ".join(run), status, [text.labels[u] for u in units], units, stated)


def claim_span(claims: Claims, yes: bool, text: DocumentText) -> Span:
    """A yes or no to a polar question, as a span: the question's claim, found where one sentence states it with
    the answer's polarity."""
    status, sentences = claims.polar(yes)
    units = list(dict.fromkeys(text.unit_of(text.sentence_starts[s]) for s in sentences))[:PLACES_SHOWN]
    shown = units if status == "found" else []
    return Span("yes" if yes else "no", status, [text.labels[u] for u in shown], shown, status == "found")
