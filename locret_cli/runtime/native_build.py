"""Building locret's small C kernels (`runtime/native/*.c`) on the user's machine, once, and loading them.

Each kernel is compiled with the C compiler `$CC` names (else `cc`, else `gcc`), `-O3 -march=native -fopenmp`, into
the cache folder (`$XDG_CACHE_HOME/locret/native`, default ~/.cache, made private to the user), under a name hashed
from its source, the compiler, its flags and the CPU, and loaded with ctypes; it runs on torch's own OpenMP threads.
A library found there is loaded only if it and its folder belong to the user and no one else may write them;
otherwise it is built again in a new private folder. No compiler, or one that fails: no library, and the caller
keeps torch's kernels.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from locret_cli.runtime.dtype_probe import cache_file, cpu_name, cpuinfo

NATIVE = Path(__file__).parent / "native"
FLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC"]


def build(source: Path) -> tuple[ctypes.CDLL, str] | None:
    """The library of `source` and the hash that names it, compiled once per source, compiler and CPU (its name and
    flags) into the cache folder (into a new private temporary folder where that cannot be written, or where it or
    the library found there is not the user's alone: `only_ours`); None where no compiler builds it."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    built_for = " ".join([compiler, *FLAGS, cpu_name(), *sorted(cpuinfo("flags").split())])
    name = hashlib.sha256(source.read_bytes() + built_for.encode()).hexdigest()[:16]
    for folder in (lambda: cache_file().parent / "native", lambda: Path(tempfile.mkdtemp(prefix="locret-native-"))):
        try:
            target = folder() / f"{source.stem}-{name}.so"
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not only_ours(target.parent) or (target.exists() and not only_ours(target)):
                continue
            if not target.exists():
                partial = target.with_name(f".{target.name}.{os.getpid()}")
                done = subprocess.run([compiler, *FLAGS, "-o", str(partial), str(source)], capture_output=True,
                                      check=False, timeout=120)
                if done.returncode != 0:
                    return None
                os.replace(partial, target)
            return ctypes.CDLL(str(target)), name
        except (OSError, subprocess.SubprocessError):
            continue
    return None


def only_ours(path: Path) -> bool:
    """Whether `path` belongs to this user and no one else may write it: a library another user could have placed
    or changed is never loaded."""
    status = path.stat()
    return status.st_uid == os.getuid() and not status.st_mode & 0o022
