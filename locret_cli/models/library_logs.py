"""Other libraries' log lines and progress bars, silenced where locret prints its own."""

from __future__ import annotations

import logging


def quiet_libraries() -> None:
    """Our own progress and messages replace the libraries' bars and log lines on stderr."""
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    logging.getLogger("accelerate").setLevel(logging.ERROR)  # `--max-memory`: the cost table says where weights are
