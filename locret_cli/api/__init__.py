"""The Python API, locret's one front door: load a model once, then read documents and ask them questions.

    from locret_cli.api import load_session
    session = load_session("Qwen/Qwen2.5-1.5B-Instruct", heads="./heads")
    result = session.ask("book.pdf", "Who signed the treaty?")
    print(result.answer, [source.label() for source in result.sources])

    reading = session.open("book.pdf")          # read once (or load a saved .locret context),
    for question in ("Who signed it?", "When?"):  # ask many times
        print(reading.ask(question).answer)
"""

from locret_cli.api.answer import AskResult
from locret_cli.api.reading import Reading
from locret_cli.api.session import Session, load_session
from locret_cli.models.spec import ModelSpec
from locret_cli.settings import AnswerSettings, ReadSettings

__all__ = ["AnswerSettings", "AskResult", "ModelSpec", "ReadSettings", "Reading", "Session", "load_session"]
