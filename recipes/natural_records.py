"""Training records with questions worded as people ask them, over a long package reference, for retaining heads.

The fact records (`recipes/smollm2/heads_data.py`) ask "What is the <attribute> of <entity>?" about a planted
sentence "The <attribute> of <entity> is <value>.". These ask what a user of a library asks of its reference: what a
setting is when left unset, whether a switch is on unless asked, what two settings default to. The documents are the
docstrings assembly of the natural task (`locret_cli/bench/natural.py`), built from a training package
(transformers, whose reference states ~9,000 defaults as "name (`type`, *optional*, defaults to `value`):"), never
from the natural task's own packages. Each record is a run of whole docstring blocks about `tokens` tokens long
with the fact's block at a random depth; its question names the setting and its owner and shares no other content
word with the fact's lines; its answer states the value as the document writes it; its `keep` passage is the
setting's lines. A record is kept only if its answer's value is in that passage and the passage in its prompt.

    kinds   default     "If I make a BertConfig without passing hidden_size, what does it come out as?"
            switch      "Is use_cache in GPT2Config switched off unless I turn it on?" (a True/False default)
            two-place   "What do num_beams in GenerationConfig and top_k in GenerationConfig default to?"

With `--facts SHARE` that share of the records are the fact records instead (`kind` "fact"), of the same length,
over the prose of the training packages locret's install brings, so heads trained on the mix keep both shapes.

    python -m recipes.natural_records --out runs/natural-records.jsonl --examples 1500 --tokens 8192 --facts 0.3
"""

from __future__ import annotations

import argparse
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from locret_cli.bench.natural import docstring_blocks
from locret_cli.inputs.prompt import question_text
from recipes import prose
from recipes.smollm2 import heads_data

PACKAGE = "transformers"
CHARS_PER_TOKEN = 3.6  # the docstrings' characters per Qwen2.5 token, near enough to size a window
SETTING = re.compile(r"^(?P<indent>[ \t]*)(?P<name>[A-Za-z_]\w*) \(`[^`\n]+`(?:, \*optional\*)?, defaults to "
                     r"(?P<value>`[^`\n]+`|[^)\n]+)\):[ \t]*\n(?P<more>(?:(?P=indent)[ \t]+\S[^\n]*\n?)*)", re.M)
DEFAULT_QUESTIONS = (
    "If I make a {owner} without passing {name}, what does it come out as?",
    "What value does {owner} give {name} when I leave it out?",
    "What's {name} set to in {owner} unless I say otherwise?",
    "Out of the box, what does {owner} use for {name}?",
    "I never set {name} on my {owner}; what value is it using?",
)
SWITCH_QUESTIONS = (
    "Is {name} in {owner} switched {state} unless I turn it {other}?",
    "Is {name} {state} in {owner} if I don't touch it?",
)
TWO_PLACE_QUESTION = "What do {first} and {second} default to?"


@dataclass(frozen=True)
class Setting:
    """A documented default: `name` of `owner` (its block's dotted name) is `value` (as written, backticks
    stripped), stated in `lines` of block number `block`."""

    owner: str
    name: str
    value: str
    lines: str
    block: int

    @property
    def short_owner(self) -> str:
        """The owner as a user names it: a class by its name, a method or function with what holds it."""
        parts = self.owner.split(".")
        return parts[-1] if parts[-1][:1].isupper() or len(parts) == 1 else ".".join(parts[-2:])

    @property
    def is_class(self) -> bool:
        return self.owner.rsplit(".", 1)[-1][:1].isupper()

    @property
    def spoken(self) -> str:
        return f"{self.name} in {self.short_owner}"


def settings_in(blocks: list[str]) -> list[Setting]:
    """Every default the blocks state, of a value short enough to be an answer (at most 40 characters)."""
    found = []
    for index, block in enumerate(blocks):
        owner = block.split("\n", 1)[0]
        for match in SETTING.finditer(block):
            value = match["value"].strip().strip("`").strip()
            if value and len(value) <= 40 and "\n" not in value and not value.startswith("self."):
                found.append(Setting(owner, match["name"], value, match[0].rstrip("\n"), index))
    return found


def question_for(setting: Setting, rng: random.Random) -> tuple[str, str, str]:
    """(kind, question, answer) about one setting."""
    if setting.value in ("True", "False") and rng.random() < 0.5:
        state, other = ("off", "on") if rng.random() < 0.5 else ("on", "off")
        template = rng.choice(SWITCH_QUESTIONS)
        question = template.format(name=setting.name, owner=setting.short_owner, state=state, other=other)
        holds = (state == "on") == (setting.value == "True")
        answer = f"{'Yes' if holds else 'No'}: {setting.spoken} defaults to {setting.value}."
        return "switch", question, answer
    templates = DEFAULT_QUESTIONS if setting.is_class else DEFAULT_QUESTIONS[1:]  # one makes "a {owner}"
    question = rng.choice(templates).format(name=setting.name, owner=setting.short_owner)
    return "default", question, f"{setting.spoken} defaults to {setting.value}."


def window(blocks: list[str], centre: int, chars: int, rng: random.Random) -> tuple[int, int]:
    """[first, last) block indices of a run of about `chars` characters holding block `centre` at a random depth
    (moved inwards where the package's reference begins or ends first)."""
    before = rng.uniform(0.02, 0.98) * chars
    first, last, size = centre, centre + 1, len(blocks[centre])
    while first > 0 and size + len(blocks[first - 1]) < before:
        first -= 1
        size += len(blocks[first]) + 2
    while last < len(blocks) and size + len(blocks[last]) < chars:
        size += len(blocks[last]) + 2
        last += 1
    while first > 0 and size + len(blocks[first - 1]) < chars:
        first -= 1
        size += len(blocks[first]) + 2
    return first, last


def record(blocks: list[str], settings: list[Setting], tokens: int, rng: random.Random) -> dict | None:
    """One record (prompt, answer, keep, kind), or None where the chosen facts do not make one (an owner that
    states a setting twice, a second fact outside the window)."""
    first_fact = rng.choice(settings)
    start, stop = window(blocks, first_fact.block, int(tokens * CHARS_PER_TOKEN), rng)
    facts = [first_fact]
    if rng.random() < 0.25:
        near = [s for s in settings if start <= s.block < stop and (s.owner, s.name) != (first_fact.owner,
                                                                                         first_fact.name)]
        if not near:
            return None
        facts.append(rng.choice(near))
        kind = "two-place"
        question = TWO_PLACE_QUESTION.format(first=facts[0].spoken, second=facts[1].spoken)
        answer = " ".join(f"{f.spoken} defaults to {f.value}." for f in facts)
    else:
        kind, question, answer = question_for(first_fact, rng)
    document = "\n\n".join(blocks[start:stop])
    if any(document.count(f.lines) != 1 or f.value not in f.lines for f in facts):
        return None
    inside = [s for s in settings if start <= s.block < stop]
    if any((s.short_owner, s.name) == (f.short_owner, f.name) and s.value != f.value for f in facts for s in inside):
        return None  # the window gives the asked setting another value elsewhere
    return {"prompt": document + question_text(question), "answer": answer, "keep": [f.lines for f in facts],
            "kind": kind}


def records(blocks: list[str], examples: int, tokens: int, seed: int) -> list[dict]:
    """`examples` records drawn with `seed` (the same blocks and seed give the same records)."""
    rng = random.Random(seed)
    settings = settings_in(blocks)
    if not settings:
        raise SystemExit("the package's docstrings state no defaults of the form this generator reads")
    made: list[dict] = []
    for _ in range(examples * 20):
        made += [r for r in [record(blocks, settings, tokens, rng)] if r is not None]
        if len(made) == examples:
            return made
    raise SystemExit(f"made only {len(made)} of {examples} records from {len(settings)} settings")


def mixed(natural: list[dict], paragraphs: list[str], facts: int, tokens: int, seed: int) -> list[dict]:
    """`natural` and `facts` fact records of `tokens` tokens over `paragraphs`, in a seeded shuffle (the same
    arguments give the same list)."""
    rng = random.Random(seed + 1)
    made = natural + [{**heads_data.record(paragraphs, tokens, rng), "kind": "fact"} for _ in range(facts)]
    rng.shuffle(made)
    return made


def package_blocks(package: str = PACKAGE, extra: Path | None = None) -> list[str]:
    """The docstrings assembly of an installed training package (never one of the natural task's own)."""
    if package not in prose.TRAIN_PACKAGES:
        raise SystemExit(f"{package} is not a training package ({', '.join(prose.TRAIN_PACKAGES)})")
    root = prose.package_root(package, extra)
    if root is None:
        raise SystemExit(f"{package} is not installed")
    return docstring_blocks(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--examples", type=int, default=1500)
    parser.add_argument("--tokens", type=int, default=8192, help="each document's length, near enough")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--package", default=PACKAGE)
    parser.add_argument("--facts", type=float, default=0.0, help="the share of fact records in the mix (0-1)")
    args = parser.parse_args()
    if not 0 <= args.facts <= 1:
        raise SystemExit(f"--facts is a share between 0 and 1, not {args.facts}")
    facts = round(args.examples * args.facts)  # fact records in place of natural ones: none made to be dropped
    made = records(package_blocks(args.package), args.examples - facts, args.tokens, args.seed)
    if facts:
        made = mixed(made, prose.paragraphs(prose.MODEL_PACKAGES), facts, args.tokens, args.seed)
    with args.out.open("w") as out:
        out.writelines(json.dumps(r) + "\n" for r in made)
    kinds = {k: sum(r["kind"] == k for r in made) for k in ("default", "switch", "two-place", "fact")}
    print(f"wrote {len(made)} records to {args.out}: {kinds}")


if __name__ == "__main__":
    main()
