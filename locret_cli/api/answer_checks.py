"""The one step after every route: an answer checked against the document before anyone sees it.

- Grounding (`grounding.ground`): is the answer's specific content in the document as written?
- Restating: a model that copies a value into a fixed form (the embedded one) sometimes garbles the question's own
  phrase around a right value ("The keeper surveyors name of ... is Ashby."). When that answer is not grounded and
  the same value, restated in the question's words (`QuestionForms.restated`), is, the restated answer is shown.
- Strict mode: an untrusted answer is replaced with "The document does not say.", and the model's words are kept
  as `withheld`; `refuse_unfound` does so only for an answer some specific word of which occurs nowhere in the
  document (grounding `not_found`: made up), or, with `unfound_in` "read", nowhere in the windows it read again
  and the question; `answerable_below` where the model, asked whether the windows answer the question, said yes
  by a share under it.
- Sources: none for an answer that says the document is silent; else the pages that hold the answer's content first.
"""

from __future__ import annotations

from dataclasses import dataclass

from locret_cli.api.routes import DraftAnswer, ReadDocument
from locret_cli.checks.grounding import REFUSAL, DocumentText, Grounding, ground
from locret_cli.core.answer.reread import Window
from locret_cli.inputs.sources import Source, answer_first
from locret_cli.models.loading import QuestionForms
from locret_cli.settings import AnswerSettings


@dataclass
class Checked:
    """An answer as shown: its text, sources, grounding, the model's answer if strict mode withheld it, and the
    model's own words if the answer was restated in the question's."""

    answer: str
    sources: list[Source] | None
    grounding: Grounding | None
    withheld: str | None = None
    restated_from: str | None = None


def check_answer(document: ReadDocument, question: str, drafted: DraftAnswer, sources: int) -> Checked:
    """`drafted`'s answer to `question`, grounded in the document's text (when its tokens are at hand), restated or
    withheld as the model's forms and strict mode say, with its sources ordered (`sources` > 0) or None."""
    generation, answering, forms = drafted.generation, drafted.engine.answering, document.question_forms
    answer = document.tokenizer.decode(generation.token_ids, skip_special_tokens=True).strip()
    cut = len(generation.token_ids) >= answering.max_new_tokens
    text = document.text() if document.input_ids is not None else None
    grounding = ground(question, answer, text, cut) if text is not None else None
    restated_from = withheld = None
    if grounding is not None and not grounding.grounded and forms is not None:
        restated = forms.restated(question, answer)
        again = ground(question, restated, text, cut) if restated else None
        if again is not None and again.status == "found":
            answer, restated_from, grounding = restated, answer, again
    made_up = answering.refuse_unfound and unfound(grounding)
    if answering.refuse_unfound and answering.unfound_in == "read" and drafted.route == "windows" and text is not None:
        made_up = unfound(ground(question, answer, read_text(document, drafted.windows, question), cut))
    if (answering.strict and untrusted(forms, question, answer, grounding)) or made_up or \
            said_unanswered(drafted.answerable, answering):
        answer, withheld = REFUSAL, answer
    cited = drafted.sources
    if answer == REFUSAL or (forms and forms.says_not_stated(answer)):
        cited = None
    elif cited and grounding is not None:
        cited = answer_first(cited, grounding.units(), document.source_map, sources)
    shown = cited if cited is not None else [] if sources > 0 else None
    return Checked(answer, shown, grounding, withheld, restated_from)


def read_text(document: ReadDocument, windows: list[Window], question: str) -> DocumentText:
    """What an answer from re-read windows read: each window's text, labelled with its pages or lines, and the
    question (the words it gives are not the answer's own)."""
    ids = document.input_ids.tolist()
    texts = [document.tokenizer.decode(ids[w.first:w.end], skip_special_tokens=True) for w in windows]
    return DocumentText([*texts, question], [*(w.label for w in windows), "the question"])


def said_unanswered(answerable: float | None, answering: AnswerSettings) -> bool:
    """Whether `answerable_below` withholds an answer: the model, asked whether the windows it read answer the
    question, said yes by a share (`answerable`, None when not asked) under the setting."""
    return answerable is not None and answerable < answering.answerable_below


def unfound(grounding: Grounding | None) -> bool:
    """Whether `--refuse-unfound` withholds an answer of this grounding: some specific word of it is nowhere in the
    document."""
    return grounding is not None and grounding.status == "not_found"


def untrusted(forms: QuestionForms | None, question: str, answer: str, grounding: Grounding | None) -> bool:
    """Whether a strict answer must be withheld: its content is not in the document as written; or it states
    nothing ("No." to a question that asks for a value, "It is not known."), unless it is the refusal itself or the
    model's own way of saying the document is silent; or the model cannot answer a question of this form (the
    embedded model's out-of-form questions)."""
    if grounding is not None and not grounding.grounded:
        return True
    silent = answer == REFUSAL or (forms is not None and forms.says_not_stated(answer))
    if grounding is not None and grounding.status == "n/a" and not silent:
        return True
    return forms is not None and forms.warning(question) is not None
