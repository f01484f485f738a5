"""What a value found in the document is claimed for, and whether the document says so there.

A value is **bound** to a question where it sits in a sentence that names the question's own words as fully as any
sentence of the document does, with the same polarity as the answer: a negation within NEGATION_REACH words before
the value, and not behind a semicolon, a colon or a "but", denies it. So "7762" is not bound to "the gate code of the
north depot" in "... The gate code of the north depot is 4821. The radio channel of the north depot is 7762.": the
first sentence names more of the question. Nor is "1999" bound to an answer that says the meeting was held in a
sentence that says it was not, while "Bergen" is, in "The fair was not held in Oslo; it was held in Bergen.".

Nor is a value bound where a sentence gives it to another thing: where its clause names none of the question's
words but things of its own, and another clause of the sentence names the question and gives it a value ("Ingrid",
asked the harbour pilot, in "The lock keeper is Ingrid and the harbour pilot is Kwame.").

A polar question ("Was the annual meeting held in 1999?") is answered by yes or no: its claim is the question's own
words, found together in one sentence, of the polarity the answer gives.
"""

from __future__ import annotations

from collections import Counter

NEGATIONS = frozenset("not no never neither nor cannot none nobody nothing".split())
NEGATION_REACH = 8  # words before a value, in its sentence, where a negation denies it ("was not held in 1999")
AUXILIARIES = frozenset("""is are was were am do does did can could has have had will would shall should may might must
isn't aren't wasn't weren't doesn't don't didn't can't couldn't hasn't haven't hadn't won't wouldn't shouldn't""".split())
YES, NO = frozenset("yes yeah yep correct true".split()), frozenset("no nope false incorrect".split())
# words a question asks with, naming the answer's kind, not a thing the document must name
ANSWER_KINDS = frozenset("""year years date day days month time times number numbers amount value values name names
colour color kind type size count place city country person people year's""".split())


def negated(words: list[str]) -> bool:
    return any(w in NEGATIONS or w.endswith("n't") for w in words)


def is_polar(question_words: list[str]) -> bool:
    """A yes-or-no question: it opens with an auxiliary verb ("Was the meeting held...", "Does it ...")."""
    return bool(question_words) and question_words[0] in AUXILIARIES


def polarity(answer_words: list[str]) -> bool | None:
    """True for an answer that opens with yes, False for no, None for neither."""
    first = answer_words[0] if answer_words else ""
    return True if first in YES else False if first in NO else None


def variants(word: str) -> tuple[str, ...]:
    """The forms of `word` that count as it: the word, its plural or third person, and the form without an `s`."""
    forms = [word, word + "s", word + "es"]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        forms.append(word[:-1])
    return tuple(forms)


class Claims:
    """The sentences of a document scored by how many of one question's words each names."""

    def __init__(self, text, asked: list[str], common: frozenset[str] = frozenset()):
        self.text = text
        self.asked = asked
        self.common = common  # words that are no thing's name ("the", "is", ...)
        self.forms = {form: word for word in asked for form in variants(word)}  # each form -> the asked word
        self.named: Counter[int] = Counter()  # sentence index -> how many asked words it names
        for word in asked:
            sentences = {text.sentence_of(i) for form in variants(word) for i in text.where.get(form, ())}
            self.named.update(sentences)
        self.best = max(self.named.values(), default=0)

    def bound(self, index: int, length: int, answer_negated: bool) -> bool:
        """Whether words index..index+length-1 sit in a sentence that names the question as fully as any sentence
        of the document, of the answer's polarity (True when the question names nothing the document holds)."""
        sentences = range(self.text.sentence_of(index), self.text.sentence_of(index + length - 1) + 1)
        start = max(self.text.scope_start(index), index - NEGATION_REACH)
        if negated(self.text.words[start:index + length]) != answer_negated:
            return False
        if self.best and self.given_elsewhere(index, length):
            return False
        return self.best == 0 or max(self.named[s] for s in sentences) == self.best

    def given_elsewhere(self, index: int, length: int) -> bool:
        """Whether words index..index+length-1 sit in a clause that names none of the asked words but things of its
        own, in a sentence where another clause names every asked word the sentence names and a thing after them."""
        text, words = self.text, self.text.words
        clause = text.clause_of(index)
        own = [words[i] for i in text.clause_span(clause) if not index <= i < index + length]
        if any(w in self.forms for w in own) or all(w in self.common for w in own):
            return False
        sentence = text.sentence_of(index)
        other = text.clause_of(text.sentence_starts[sentence])
        while other < len(text.clause_starts) and text.sentence_of(text.clause_starts[other]) == sentence:
            span, other = text.clause_span(other), other + 1
            places = [i for i in span if words[i] in self.forms]
            if other - 1 == clause or not places or len({self.forms[words[i]] for i in places}) < self.named[sentence]:
                continue
            if any(w not in self.common and w not in self.forms for w in words[places[-1] + 1:span.stop]):
                return True
        return False

    def polar(self, answer_yes: bool) -> tuple[str, list[int]]:
        """("found", sentences) where a sentence names every asked number and more than half the asked words with
        the answer's polarity; ("contradicted", sentences) where such sentences hold only the other polarity;
        ("missing", []) where none names the claim."""
        numbers = [w for w in self.asked if any(c.isdigit() for c in w)]
        claiming = [s for s, n in self.named.items() if 2 * n > len(self.asked)
                    and all(w in self.text.sentence_words(s) for w in numbers)]
        agreeing = [s for s in claiming if negated(self.text.sentence_words(s)) != answer_yes]
        if agreeing:
            return "found", sorted(agreeing)
        return ("contradicted", sorted(claiming)) if claiming else ("missing", [])
