"""How every task and benchmark scores an answer: whether it states the asked value, and nothing the question could
be confused with.

An answer is one of:

    right        it holds the asked value (every part of it, in one of its accepted forms) and no other candidate
                 value of the document; for a question the document does not answer, it states nothing
    bound_wrong  it holds a value the document gives for something else (a neighbour's code, another year), alone
                 or in a list with the right one: a list of candidates is not an answer
    made_up      it states content the document does not hold (a value from nowhere)
    none         none of these: it states nothing checkable, or only words the document holds elsewhere

For a question the document does not answer, stating nothing (or that the document does not say) is right, and
stating content the document holds is bound_wrong. Telling made-up content from the document's needs its text.

`contains_match` alone counted "4821, 7762 or 1999" and "The harbour pilot is Kwame." (another entity's role) as
right; a verdict does not.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from locret_cli.checks.grounding import COMMON, DocumentText, specific_runs

VERDICTS = ("right", "bound_wrong", "made_up", "none")
NOT_STATED = re.compile(r"\b(not (stated|mentioned|given|say|said|specified|known|sure)|no (information|mention)|"
                        r"does(n't| not) (say|state|mention|specify)|(cannot|can't|can not) (tell|say|determine|find)|"
                        r"(don't|do not) know|unknown)\b", re.IGNORECASE)  # answers that state nothing


def contains_match(answer: str, expected: str) -> bool:
    """Whether `answer` holds `expected` whole, case and spacing aside: not as part of a longer number or word
    ("The pass key is 702177." does not hold 70217)."""
    answer, expected = normalise(answer), normalise(expected)
    before = r"(?<![^\W_])" if expected[:1].isalnum() else ""
    after = r"(?![^\W_])" if expected[-1:].isalnum() else ""
    return re.search(before + re.escape(expected) + after, answer) is not None


def normalise(text: str) -> str:
    """Case and surrounding whitespace and full stops do not count."""
    return " ".join(text.split()).strip(" .").casefold()


def verdict(answer: str, parts: Sequence[Sequence[str]], candidates: Sequence[str] = (),
            text: DocumentText | None = None, question: str = "") -> str:
    """The verdict on `answer` (see the module docstring). `parts` are the values the answer must all hold, each as
    its accepted forms (no parts: the document does not answer the question); `candidates` the document's values the
    question could be confused with; `text`, where given, tells made-up content from the document's own."""
    named = [c for c in candidates if c and contains_match(answer, c)
             and not any(contains_match(form, c) or contains_match(c, form) for forms in parts for form in forms)]
    if named:
        return "bound_wrong"
    if parts and all(any(contains_match(answer, form) for form in forms) for forms in parts):
        return "right"
    runs = [run for run in specific_runs(answer, question) if any(w not in COMMON for w in run)]
    if not runs or NOT_STATED.search(answer):
        return "right" if not parts else "none"
    if text is None:
        return "none"
    if any(not text.occurrences(run) for run in runs):
        return "made_up"
    return "bound_wrong" if not parts else "none"


def tally(verdicts: Sequence[str]) -> dict[str, int]:
    """Each verdict's count, every one named (0 where none)."""
    counts = Counter(verdicts)
    return {name: counts.get(name, 0) for name in VERDICTS}
