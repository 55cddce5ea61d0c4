"""Draws Shoal's data flow: docs/images/data_flow.png (shown in the README and the docs).

    python docs/figures/data_flow.py

Actors step vector envs and write through an adder to replay (Reverb or native); the learner's
dataset samples host batches, the learner updates on its devices and publishes parameters, which actors read
back (shared memory on the learner's machine, RPC elsewhere). The counter and the evaluator
close the loop: env steps counted, the run stopped when solved or out of budget.
"""

from __future__ import annotations

import pathlib

try:
    import matplotlib
except ImportError:
    raise SystemExit(
        "docs/figures/data_flow.py draws with matplotlib, which is not installed: pip install 'shoal[plots]'"
    ) from None

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parent.parent / "images" / "data_flow.png"

ACTOR, REPLAY, LEARNER, SERVICE = "#dbe9f6", "#fde9c9", "#d9f0d3", "#eeeeee"


def box(ax, x, y, w, h, title, lines, color):
    ax.add_patch(
        FancyBboxPatch(
            (x, y),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.12",
            facecolor=color,
            edgecolor="#444444",
            linewidth=1.2,
        )
    )
    ax.text(x + w / 2, y + h - 0.22, title, ha="center", va="top", fontsize=11.5, fontweight="bold")
    ax.text(
        x + w / 2,
        y + h - 0.62,
        "\n".join(lines),
        ha="center",
        va="top",
        fontsize=8.6,
        linespacing=1.35,
        color="#222222",
    )


def arrow(ax, start, end, label="", offset=(0.0, 0.12), rad=0.0, style="-|>", color="#333333"):
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle=style,
            mutation_scale=15,
            linewidth=1.5,
            color=color,
            connectionstyle=f"arc3,rad={rad}",
        )
    )
    if label:
        mx, my = (start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1]
        ax.text(mx, my, label, ha="center", va="bottom", fontsize=8.4, style="italic", color=color)


def main() -> None:
    fig, ax = plt.subplots(figsize=(10.5, 4.1), dpi=110)
    ax.set_xlim(0, 14)
    ax.set_ylim(0, 5.7)
    ax.axis("off")

    # actors (a stack: N of them), replay, learner
    for k in (2, 1):
        ax.add_patch(
            FancyBboxPatch(
                (0.3 + 0.12 * k, 2.3 + 0.12 * k),
                3.5,
                1.9,
                boxstyle="round,pad=0.02,rounding_size=0.12",
                facecolor=ACTOR,
                edgecolor="#888888",
                linewidth=0.8,
            )
        )
    box(
        ax,
        0.3,
        2.3,
        3.5,
        1.9,
        "actors  (N nodes)",
        [
            "vector env (gymnasium / ale-py)",
            "policy: one jitted call per step",
            "adder: n-step transitions",
            "or fixed-length sequences",
        ],
        ACTOR,
    )
    box(
        ax,
        5.25,
        2.3,
        3.3,
        1.9,
        "replay  (Reverb or native)",
        ["tables: replay ratio,", "on-policy queue,", "or dropping FIFO", "rate limiters pace both sides"],
        REPLAY,
    )
    box(
        ax,
        10.0,
        2.3,
        3.7,
        1.9,
        "learner  (JAX)",
        [
            "dataset: host batches,",
            "prefetched on a thread",
            "jit(shard_map(update))",
            "over the local devices (optax)",
        ],
        LEARNER,
    )
    box(ax, 0.3, 0.15, 3.5, 1.35, "counter", ["env steps, learner steps"], SERVICE)
    box(
        ax,
        10.0,
        0.15,
        3.7,
        1.35,
        "evaluator",
        ["greedy episodes; ends the run", "when solved or out of budget"],
        SERVICE,
    )

    arrow(ax, (4.12, 3.5), (5.2, 3.5), "insert items")
    arrow(ax, (8.6, 3.5), (9.95, 3.5), "sample batches")
    arrow(ax, (8.6, 2.85), (9.95, 2.85), "", style="<|-")
    ax.text(9.27, 2.72, "priorities", ha="center", va="top", fontsize=8.4, style="italic", color="#333333")
    # parameters back to the actors (over the top)
    arrow(ax, (11.85, 4.25), (2.05, 4.45), "", rad=0.14, color="#1f5fa8")
    ax.text(
        7.0,
        5.3,
        "parameters, versioned: shared memory on the learner's machine, RPC elsewhere",
        ha="center",
        va="bottom",
        fontsize=8.8,
        style="italic",
        color="#1f5fa8",
    )
    arrow(ax, (2.05, 2.25), (2.05, 1.55), "", color="#666666")
    ax.text(2.2, 1.9, "env steps", ha="left", va="center", fontsize=8.4, style="italic", color="#666666")
    arrow(ax, (11.85, 2.25), (11.85, 1.55), "", color="#666666")
    ax.text(12.0, 1.9, "parameters", ha="left", va="center", fontsize=8.4, style="italic", color="#666666")
    arrow(ax, (3.85, 0.8), (9.95, 0.8), "", color="#666666")
    ax.text(
        6.9,
        0.95,
        "counts read by the evaluator: when to evaluate, when to stop",
        ha="center",
        va="bottom",
        fontsize=8.4,
        style="italic",
        color="#666666",
    )

    fig.tight_layout(pad=0.2)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=110)
    print(OUT)


if __name__ == "__main__":
    main()
