"""The report's figures: matplotlib (Agg, no display) line and bar charts as PNG bytes, with real axes.

    figure = line_plot("Win rate", "step", "win rate", {"without hint": (xs, ys), ...}, ylim=(0, 1))
    figure = bar_plot("Rejection reasons", "failed check", "designs", {"single_env_class": 3})
    figure.png, figure.title, figure.xlabel, figure.ylabel     # engine/tools/report.py embeds them as data: URLs

matplotlib is imported when the first figure is drawn, so importing this module (and `--help`) stays light.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


@dataclass(frozen=True)
class Figure:
    title: str
    xlabel: str
    ylabel: str
    png: bytes
    series: tuple[str, ...]  # the legend's entries
    points: int  # data points drawn (0: an empty plot saying so)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=100)
    _pyplot().close(fig)
    return buffer.getvalue()


def _clean(xs, ys) -> tuple[list, list]:
    kept = [(x, y) for x, y in zip(xs, ys) if y is not None and not (isinstance(y, float) and math.isnan(y))]
    return [x for x, _ in kept], [y for _, y in kept]


def line_plot(title: str, xlabel: str, ylabel: str, series: dict[str, tuple[list, list]], *, ylim=None, note: str = "") -> Figure:
    """One line (with markers) per series; points whose value is None are left out. An empty plot says so."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    points = 0
    for i, (label, (xs, ys)) in enumerate(series.items()):
        xs, ys = _clean(xs, ys)
        if xs:
            ax.plot(xs, ys, marker="o", markersize=4, linewidth=1.6, color=COLOURS[i % len(COLOURS)], label=label)
            points += len(xs)
    if points == 0:
        ax.text(0.5, 0.5, "no data yet", ha="center", va="center", transform=ax.transAxes, color="#888")
    elif len(series) > 1 or note:
        ax.legend(fontsize=8, title=note or None, title_fontsize=8)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps and versions are whole numbers
    xs = [x for values in series.values() for x in _clean(*values)[0]]
    if xs and min(xs) == max(xs):
        ax.set_xlim(min(xs) - 1, max(xs) + 1)
    return Figure(title, xlabel, ylabel, _save(fig), tuple(series), points)


def bar_plot(title: str, xlabel: str, ylabel: str, counts: dict[str, float]) -> Figure:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    names = list(counts)
    if names:
        ax.bar(range(len(names)), [counts[n] for n in names], color=COLOURS[3])
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    else:
        ax.text(0.5, 0.5, "none", ha="center", va="center", transform=ax.transAxes, color="#888")
        ax.set_xticks([])
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, axis="y")
    ax.yaxis.get_major_locator().set_params(integer=True)
    return Figure(title, xlabel, ylabel, _save(fig), tuple(names), len(names))
