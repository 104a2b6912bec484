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


def line_plot(title: str, xlabel: str, ylabel: str, series: dict[str, tuple[list, list]], *, ylim=None, note: str = "",
              bands: dict[str, tuple[list, list, list]] | None = None) -> Figure:
    """One line (with markers) per series; points whose value is None are left out. An empty plot says so.
    `bands`: a series' interval, {label: (xs, lows, highs)}, shaded in its colour."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    points = 0
    for i, (label, (xs, ys)) in enumerate(series.items()):
        xs, ys = _clean(xs, ys)
        if xs:
            ax.plot(xs, ys, marker="o", markersize=4, linewidth=1.6, color=COLOURS[i % len(COLOURS)], label=label)
            points += len(xs)
        band = (bands or {}).get(label)
        if band and band[0]:
            ax.fill_between(band[0], band[1], band[2], color=COLOURS[i % len(COLOURS)], alpha=0.18, linewidth=0)
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


def stacked_bar_plot(title: str, xlabel: str, ylabel: str, xs: list, stacks: dict[str, list[float]], *,
                     total: tuple[str, list[float]] | None = None, share: tuple[str, list[float]] | None = None) -> Figure:
    """One bar per x, stacked from `stacks` (label -> a value per x; all-zero stacks are left out); `total` marks
    each bar's expected height (a black tick); `share` (values in [0, 1]) is a line on a second axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    kept = {label: values for label, values in stacks.items() if any(v for v in values)}
    colours = plt.get_cmap("tab20").colors
    bottom = [0.0] * len(xs)
    for i, (label, values) in enumerate(kept.items()):
        ax.bar(xs, values, bottom=bottom, color=colours[i % len(colours)], label=label, width=0.8)
        bottom = [b + v for b, v in zip(bottom, values)]
    if total is not None and xs:
        ax.scatter(xs, total[1], marker="_", s=200, color="black", label=total[0], zorder=3)
    if share is not None and xs:
        twin = ax.twinx()
        twin.plot(xs, share[1], color="black", linestyle=":", marker=".", label=share[0])
        twin.set_ylim(0, 1.05)
        twin.set_ylabel(share[0], fontsize=8)
    if not xs:
        ax.text(0.5, 0.5, "no data yet", ha="center", va="center", transform=ax.transAxes, color="#888")
    else:
        ax.legend(fontsize=7, ncol=2, loc="upper left")
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, axis="y")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    series = tuple(kept) + ((total[0],) if total else ()) + ((share[0],) if share else ())
    return Figure(title, xlabel, ylabel, _save(fig), series, len(xs) * len(kept))
