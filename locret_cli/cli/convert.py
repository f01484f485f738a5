"""`locret convert`: a GGUF model written once as a safetensors checkpoint, for `--max-memory`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from locret_cli.cli.app import app, domain_errors, plain_console
from locret_cli.errors import LocretError


@app.command()
@domain_errors
def convert(
    source: Annotated[str, typer.Argument(help="A .gguf file, smollm2 or gemma3-270m.")],
    out: Annotated[str, typer.Argument(help="A new (or empty) directory for the checkpoint.")],
    dtype: Annotated[str, typer.Option(help="Dtype of the written weights: bf16, fp16 or fp32.")] = "bf16",
) -> None:
    """Write a GGUF model as a safetensors checkpoint (config, weights, tokenizer), so that --max-memory can leave its
    weights on disk and read them layer by layer; transformers cannot do that with a GGUF file."""
    from locret_cli.models import gguf
    from locret_cli.models.library_logs import quiet_libraries
    from locret_cli.models.loading import DTYPES
    from locret_cli.units import human_bytes

    if dtype not in DTYPES:
        raise LocretError(f"unknown dtype {dtype!r}; choose bf16, fp16 or fp32")
    quiet_libraries()
    with plain_console(stderr=True).status(Text(f"converting {source}"), spinner="dots"):
        directory = gguf.convert(source, Path(out), DTYPES[dtype])
    size = sum(f.stat().st_size for f in directory.iterdir())
    sys.stdout.write(f"wrote {directory} ({human_bytes(size)}); use it with --model {directory}\n")
