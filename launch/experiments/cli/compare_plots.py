"""The figures of ``shoal compare`` (``compare``): per task, each group's mean evaluation return,
its runs' range shaded, against env steps and against wall seconds, as PNG and SVG; and the
axes of such a learning-curve figure (``label_axes``, which ``benchmarks/solve.py`` uses too).

matplotlib is the ``plots`` extra (``pip install 'shoal[plots]'``), imported only by ``pyplot``
when a figure is drawn: training never imports it."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np

from shoal.core.files import write_output


def curve(runs: list[dict], column: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x, mean, low, high)`` of eval return against ``column`` (0: env steps, 1: wall s) over
    ``runs``, each interpolated on the union of their x values (its last return kept after its end)."""
    x = np.unique(np.concatenate([r["evals"][:, column] for r in runs]))
    ys = np.array([np.interp(x, r["evals"][:, column], r["evals"][:, 2]) for r in runs])
    return x, ys.mean(axis=0), ys.min(axis=0), ys.max(axis=0)


def pyplot(what: str = "shoal compare's figures") -> Any:
    """matplotlib's ``pyplot`` on the Agg backend (files, no display); where matplotlib is not
    installed, a ``RuntimeError`` of one line saying that ``what`` needs the ``plots`` extra."""
    try:
        import matplotlib  # lazy: optional extra (plots)
    except ImportError:
        raise RuntimeError(f"{what} need matplotlib, which is not installed: pip install 'shoal[plots]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: optional extra (plots)

    return plt


def plot_task(runs: list[dict], task: str, path: str) -> None:
    """``path``.png and ``path``.svg: each group's mean eval return (its range shaded) against
    env steps and against wall seconds; the target dashed."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for group in sorted({r["group"] for r in runs}):
        members = [r for r in runs if r["group"] == group]
        for ax, column in zip(axes, (0, 1)):
            x, mean, low, high = curve(members, column)
            (line,) = ax.plot(x, mean, label=f"{group} ({len(members)} runs)")
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    target = next((r["target"] for r in runs if r["target"] is not None), None)
    label_axes(axes, target, "eval return (mean, range)", "wall seconds")
    fig.suptitle(task)
    fig.tight_layout()
    try:
        for suffix, options in ((".png", {"dpi": 80}), (".svg", {})):
            image = io.BytesIO()
            fig.savefig(image, format=suffix[1:], **options)
            write_output(path + suffix, image.getvalue())
    finally:
        plt.close(fig)


def label_axes(axes: Sequence[Any], target: float | None, ylabel: str, wall_label: str) -> None:
    """The two panels of a learning-curve figure (against env steps, and against wall seconds):
    axis labels, a grid, the target dashed, the legend on the first."""
    for ax, xlabel in zip(axes, ("env steps", wall_label)):
        if target is not None:
            ax.axhline(target, color="grey", linestyle="--", linewidth=1, label="target")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
