"""`locret train`: fit retaining heads for a model."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer
from rich.text import Text

from locret_cli.cli import option_groups
from locret_cli.cli.app import app, domain_errors, plain_console, warn
from locret_cli.errors import LocretError
from locret_cli.models.library_logs import quiet_libraries


@app.command()
@domain_errors
def train(
    model: Annotated[str, typer.Option(help="Hub id, local directory, .gguf file, smollm2 or gemma3-270m: the (frozen) model.")],
    data: Annotated[str, typer.Option(help="JSONL of prompt/answer, or ShareGPT-style JSON conversations.")],
    out: Annotated[str, typer.Option(help="Directory for the trained heads and checkpoints.")],
    steps: Annotated[int, typer.Option(help="Optimiser steps (one example each).")] = 3000,
    lr: Annotated[float, typer.Option(help="AdamW learning rate.")] = 5e-4,
    beta1: Annotated[float, typer.Option(help="AdamW beta1.")] = 0.9,
    beta2: Annotated[float, typer.Option(help="AdamW beta2.")] = 0.95,
    weight_decay: Annotated[float, typer.Option(help="AdamW weight decay.")] = 0.01,
    warmup: Annotated[Optional[int], typer.Option(help="Linear warmup steps, then linear decay. Default 5% of steps.")] = None,
    clip_value: Annotated[float, typer.Option(help="Gradient value clipping.")] = 0.5,
    smooth_weight: Annotated[float, typer.Option(help="Weight α of the smoothness loss MSE(pred\\[k], pred\\[k-1]).")] = 0.0025,
    rank_weight: Annotated[float, typer.Option(
        help="Weight β of the ranking loss KL(softmax(label) ‖ softmax(pred)) over each prompt's tokens. "
             "0: the paper's loss.")] = 0.0,
    keep_weight: Annotated[float, typer.Option(
        help="Weight γ of the keep loss, which ranks the tokens of each record's 'keep' passages above the others' "
             "top --keep-against share. 0: off.")] = 0.0,
    keep_against: Annotated[float, typer.Option(
        help="Share of each prompt's other tokens, its highest scored, that kept tokens must outscore.")] = 0.01,
    hidden: Annotated[int, typer.Option(help="Hidden width of each head.")] = 1024,
    init: Annotated[Optional[str], typer.Option(
        help="Go on training these heads (a heads directory, or 'shipped': the heads shipped for MODEL) instead of "
             "new ones; their width replaces --hidden.")] = None,
    max_len: Annotated[int, typer.Option(help="Prompts longer than this many tokens are cut in the middle.")] = 10240,
    save_every: option_groups.SaveEvery = 500,
    eval_fraction: Annotated[float, typer.Option(help="Share of examples held out for the final accuracy.")] = 0.05,
    seed: Annotated[int, typer.Option(help="Seed for head initialisation and data order.")] = 0,
    resume: option_groups.Resume = False,
    overwrite: option_groups.Overwrite = False,
    device: option_groups.model_option("device") = "auto",
    dtype: Annotated[str, typer.Option(help="Dtype of the frozen model: auto, bf16, fp16 or fp32.")] = "auto",
    load_4bit: Annotated[bool, typer.Option("--load-4bit", help="Load the frozen model in 4-bit nf4.")] = False,
    trust_remote_code: option_groups.model_option("trust_remote_code") = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON document on stdout.")] = False,
) -> None:
    """Train retaining heads for MODEL on prompt/answer DATA and save them in OUT."""
    from locret_cli.cli.report import TrainProgress, train_table
    from locret_cli.models.loading import load_model
    from locret_cli.models.shipped import find_shipped
    from locret_cli.models.spec import ModelSpec
    from locret_cli.training import TrainConfig, train_heads

    quiet_libraries()
    err = plain_console(stderr=True)
    config = TrainConfig(steps=steps, lr=lr, betas=(beta1, beta2), weight_decay=weight_decay, warmup=warmup,
                         clip_value=clip_value, smooth_weight=smooth_weight, rank_weight=rank_weight,
                         keep_weight=keep_weight, keep_against=keep_against, hidden=hidden,
                         save_every=save_every, eval_fraction=eval_fraction, seed=seed)
    ModelSpec(model, device=device, dtype=dtype, load_4bit=load_4bit, trust_remote_code=trust_remote_code).checked()
    with err.status(Text(f"loading {model}"), spinner="dots"):
        loaded = load_model(model, device, dtype, load_4bit, trust_remote_code)
    start = init
    if init == "shipped":
        shipped = find_shipped(loaded.model)
        if shipped is None:
            raise LocretError(f"--init shipped: no heads are shipped for {model}; name a heads directory")
        start = shipped.directory
    with TrainProgress(err, steps) as progress:
        summary = train_heads(
            loaded, data, out, config, max_len=max_len, resume=resume, overwrite=overwrite,
            warn=lambda message: warn(err, message), on_step=progress.step, init=start,
        )
    if as_json:
        from dataclasses import asdict

        sys.stdout.write(json.dumps(asdict(summary)) + "\n")
    else:
        err.print(train_table(summary, out))
