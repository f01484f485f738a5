"""The model `locret ask` uses when no --model is given, shipped inside the package.

A 3.7M-parameter Llama trained from scratch on generated documents by `python -m recipes.build_embedded`, its
tiktoken BPE tokenizer, its retaining heads (trained with `locret train`) and the engine settings recorded with it
(`locret.json`). It is a demonstration that the method works: it finds facts stated in a long document under a tight
budget. It knows nothing else; real questions about real books need a real model through --model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from locret_cli.checks.grounding import REFUSAL
from locret_cli.core.heads import RetainingHeads
from locret_cli.errors import LocretError
from locret_cli.models.heads_files import load_heads
from locret_cli.models.loading import LoadedModel, load_model

EMBEDDED_DIR = Path(__file__).resolve().parent / "embedded_model"
NAME = "embedded demo model (3.7M, trained on synthetic documents)"
QUESTION_FORMS = (re.compile(r"What is the pass key\?"), re.compile(r"What is the \S.* of \S.*\?"))
NOT_STATED = REFUSAL  # the reply to a question of another form that the document is silent on
NOT_STATED_ENDING = " is not stated."


def of_model_form(question: str) -> bool:
    """Whether `question` is of a form the embedded model was trained on (`synthetic.py`: "What is the <attribute>
    of <entity>?" and "What is the pass key?")."""
    return any(form.fullmatch(question.strip()) for form in QUESTION_FORMS)


def question_warning(question: str) -> str | None:
    """Why an answer to `question` cannot be trusted, when it is not of the embedded model's forms; None when it
    is."""
    if of_model_form(question):
        return None
    return ('the embedded demo model was trained only on "What is the <attribute> of <entity>?" and "What is the '
            'pass key?"; its answer to another question is unreliable (pass a real model with --model)')


def not_stated_reply(question: str) -> str:
    """The reply to `question` when the document does not answer it (`recipes/embedded/unanswerable.py` teaches it). A
    question of the model's form is restated, so that the model decides at the value, where it looks the key up, as
    it does for a stated fact: "What is the gate code of the north depot?" gets "The gate code of the north depot is
    not stated."; any other gets `NOT_STATED`."""
    if not of_model_form(question):
        return NOT_STATED
    return f"The {question.strip()[len('What is the '):-1]}{NOT_STATED_ENDING}"


def says_not_stated(answer: str) -> bool:
    """Whether `answer` is one of the replies of `not_stated_reply`: the document does not say."""
    answer = answer.strip()
    return answer == NOT_STATED or (answer.startswith("The ") and answer.endswith(NOT_STATED_ENDING))


def restated(question: str, answer: str) -> str | None:
    """The value `answer` gives ("... is 4821."), in the words of `question`, when it is of the model's form: "What
    is the gate code of the north depot?" gets "The gate code of the north depot is 4821.". None for a question of
    another form, an answer with no " is " or none after it, or a not-stated reply."""
    question = question.strip()
    _, said, value = answer.strip().rpartition(" is ")
    if not of_model_form(question) or not said or not value.strip(" .") or says_not_stated(answer):
        return None
    return f"The {question[len('What is the '):-1]} is {value}"


class EmbeddedForms:
    """The embedded model's question forms and its "not stated" reply, as `LoadedModel.question_forms`."""

    def warning(self, question: str) -> str | None:
        return question_warning(question)

    def says_not_stated(self, answer: str) -> bool:
        return says_not_stated(answer)

    def restated(self, question: str, answer: str) -> str | None:
        return restated(question, answer)


def load_embedded(device: str = "auto", dtype: str = "auto") -> tuple[LoadedModel, RetainingHeads]:
    """The embedded model, tokenizer, heads and recorded defaults, from package data; nothing is downloaded."""
    if not (EMBEDDED_DIR / "model.safetensors").is_file():
        raise LocretError(f"the embedded model is missing from {EMBEDDED_DIR}; reinstall locret-cli")
    loaded = load_model(str(EMBEDDED_DIR), device=device, dtype=dtype)
    loaded.name = NAME
    loaded.defaults = json.loads((EMBEDDED_DIR / "locret.json").read_text())
    loaded.question_forms = EmbeddedForms()
    return loaded, load_heads(EMBEDDED_DIR / "heads", loaded.model)
