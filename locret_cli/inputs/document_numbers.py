"""Numbers an answer may give: those the document holds.

A small model reading its bounded cache can copy a number and run on ("The pass key is 702177." for 70217, "81454545"
for 81454). With `numbers_from_document` on, each digit an answer gives must keep the number it is writing the start
of a number the document holds; where the likeliest token would not, the next likeliest is taken (`Engine.decode`).
Separators between digit groups ("4,821") continue a number; a space or any other character starts a new one.

    numbers = DocumentNumbers.of(["70217", "4821"], NumberTokens.of(tokenizer))
    numbers.allows(answer_so_far, candidate)
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SPACE_FORMS = (" ", "Ġ", "▁")  # a space before a token in a vocabulary: as text, byte-level BPE, SentencePiece
SEPARATORS = (",", "'", "’")  # between digit groups, as in 4,821 and 1'000'000


@dataclass(frozen=True)
class NumberTokens:
    """A vocabulary's tokens that write digits (id: the digits), those of them after a space (they start a number),
    and the separators that may join two digit groups."""

    digits: Mapping[int, str]
    spaced: frozenset[int]
    separators: frozenset[int]

    @classmethod
    @functools.lru_cache(maxsize=4)  # one scan of the vocabulary per tokenizer, not per document
    def of(cls, tokenizer) -> NumberTokens:
        vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
        digits, spaced, separators = {}, set(), set()
        for token, index in vocab.items():
            bare = token[1:] if token[:1] in SPACE_FORMS else token
            if bare.isascii() and bare.isdigit():
                digits[index] = bare
                if bare != token:
                    spaced.add(index)
            elif token in SEPARATORS:
                separators.add(index)
        return cls(digits, frozenset(spaced), frozenset(separators))


@dataclass(frozen=True)
class DocumentNumbers:
    """Every start of every run of digits the document holds ("702" for 70217), and the tokens that write them."""

    starts: frozenset[str]
    tokens: NumberTokens

    @classmethod
    def of(cls, words: Iterable[str], tokens: NumberTokens) -> DocumentNumbers:
        """From the document's words, as grounding reads them ("4,821" is "4821"; "3.14" holds 3 and 14)."""
        starts = set()
        for word in words:
            run = ""
            for char in word + " ":
                if char.isascii() and char.isdigit():
                    run += char
                    continue
                starts.update(run[:i] for i in range(1, len(run) + 1))
                run = ""
        return cls(frozenset(starts), tokens)

    def allows(self, answer: list[int], candidate: int) -> bool:
        """Whether `candidate` may follow the tokens `answer`: it writes no digits, or the number it adds them to
        starts a number of the document. After a separator, the digits may also start a number of their own."""
        digits, tokens = self.tokens.digits.get(candidate), self.tokens
        if digits is None:
            return True
        previous = answer[-1] if answer else None
        if candidate in tokens.spaced or (previous not in tokens.digits and previous not in tokens.separators):
            return digits in self.starts
        if previous in tokens.separators:
            return digits in self.starts or self.number_at_end(answer[:-1]) + digits in self.starts
        return self.number_at_end(answer) + digits in self.starts

    def number_at_end(self, answer: list[int]) -> str:
        """The digits of the number `answer` ends with ("" if it ends with none), across separators between groups."""
        groups, at, digits = [], len(answer), self.tokens.digits
        while at > 0 and answer[at - 1] in digits:
            at -= 1
            groups.append(digits[answer[at]])
            if answer[at] in self.tokens.spaced:
                break
            if at >= 2 and answer[at - 1] in self.tokens.separators and answer[at - 2] in digits:
                at -= 1
        return "".join(reversed(groups))
