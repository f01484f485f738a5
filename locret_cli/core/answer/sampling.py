"""How an answer's next token is chosen from the model's logits: the answer settings' rules, apart from reading.

`Sampler.choose` takes the likeliest token (or samples one, above temperature 0) among those the settings allow: with
`word_repeats` off, never the word just given; with `numbers_from_document`, no digit that would make a number the
document does not hold. `repeated_run` is the `stop_repeats` rule's test.
"""

from __future__ import annotations

import torch

from locret_cli.inputs.document_numbers import DocumentNumbers
from locret_cli.settings import AnswerSettings

NUMBER_TRIES = 32  # numbers_from_document passes over at most this many tokens for one step


class Sampler:
    """The next-token rules of `answering`; `words` are the tokens that begin a word (`prompt.word_ids`)."""

    def __init__(self, answering: AnswerSettings, words: frozenset[int]):
        self.answering, self.words = answering, words
        self.generator = torch.Generator(device="cpu").manual_seed(answering.seed)

    def choose(self, logits: torch.Tensor, answer: list[int], numbers: DocumentNumbers | None = None) -> int:
        """The next token after `answer` (`pick`), none that the answer settings rule out: with word_repeats off, the
        word just given; with numbers_from_document on (and `numbers` known), a digit that would make a number the
        document does not hold (at most NUMBER_TRIES tokens are passed over)."""
        if not self.answering.word_repeats and answer and answer[-1] in self.words:
            logits[answer[-1]] = -torch.inf
        token = self.pick(logits)
        if self.answering.numbers_from_document and numbers is not None:
            for _ in range(NUMBER_TRIES):
                if numbers.allows(answer, token):
                    break
                logits[token] = -torch.inf
                token = self.pick(logits)
        return token

    def pick(self, logits: torch.Tensor) -> int:
        """Next token from logits (vocab,): argmax at temperature 0, else top-p sampling."""
        if self.answering.temperature == 0:
            return int(logits.argmax())
        probs = torch.softmax(logits.cpu() / self.answering.temperature, dim=-1)
        ordered, index = probs.sort(descending=True)
        keep = ordered.cumsum(-1) - ordered < self.answering.top_p
        ordered = torch.where(keep, ordered, 0.0)
        choice = torch.multinomial(ordered / ordered.sum(), 1, generator=self.generator)
        return int(index[choice])


def repeated_run(tokens: list[int], shortest: int) -> int:
    """The length of a run of at least `shortest` tokens that `tokens` ends with twice in a row ("A. A."), or 0."""
    n = len(tokens)
    for period in range(shortest, n // 2 + 1):
        if tokens[n - period:] == tokens[n - 2 * period:n - period]:
            return period
    return 0
