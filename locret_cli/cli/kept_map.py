"""A picture of where the cache's memory of a document lies: kept entries per page or line range."""

from __future__ import annotations

from locret_cli.errors import LocretError
from locret_cli.files import refuse_existing


def write_kept_map(labels: list[str], kept: list[float], cited: list[str], path: str, title: str,
                   force: bool = False) -> None:
    """Bars of `kept` entries per unit (`labels`, in document order), the `cited` units drawn in red and named;
    saved as PNG at `path`. Needs matplotlib (the `plot` extra)."""
    target = refuse_existing(path, force)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise LocretError("--kept-map needs matplotlib: pip install 'locret-cli[plot]'") from None
    figure, axes = plt.subplots(figsize=(min(4 + len(labels) / 12, 24), 3.6), layout="constrained")
    colours = ["tab:red" if label in cited else "tab:blue" for label in labels]
    axes.bar(range(len(labels)), kept, width=1.0, color=colours)
    for rank, label in enumerate(cited, 1):
        if label in labels:
            at = labels.index(label)
            axes.annotate(f"#{rank} {label}", (at, kept[at]), textcoords="offset points", xytext=(0, 4),
                          ha="center", fontsize=8, color="tab:red")
    step = max(1, len(labels) // 12)
    axes.set_xticks(range(0, len(labels), step), [labels[i] for i in range(0, len(labels), step)], fontsize=8)
    axes.set_xlim(-0.5, len(labels) - 0.5)
    axes.set_ylabel("entries kept per head")
    axes.set_title(title, fontsize=10, parse_math=False)  # a file name is text, not mathtext
    try:
        figure.savefig(target, dpi=110)
    except OSError as exc:
        raise LocretError(f"cannot write {path}: {exc.strerror}") from None
    finally:
        plt.close(figure)
