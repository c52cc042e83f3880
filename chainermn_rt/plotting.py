"""PNG plots with matplotlib's Agg backend (imported only when a plot is asked for)."""

from __future__ import annotations

from pathlib import Path

from chainermn_rt.files import write_atomically


def axes(width: float = 6.0, height: float = 4.5):
    """A new (figure, axes) pair."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height), dpi=120)


def save(fig, ax, path: Path, title: str, xlabel: str, ylabel: str) -> None:
    """Label, grid and legend the axes, then write the PNG atomically and free the figure."""
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    write_atomically(path, lambda f: fig.savefig(f, format="png"), binary=True)
    plt.close(fig)


def png(fig) -> bytes:
    """The figure as PNG bytes (a page embeds them); frees the figure."""
    import io

    import matplotlib.pyplot as plt

    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()
