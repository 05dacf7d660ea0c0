"""The report's figures: matplotlib drawn to SVG text, to be inlined in one HTML file."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # no display: the report is written by a command, often on a server

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from swarm.report.measures import RunMeasures

ACCENT = "#3b5bdb"
COLORS = ["#3b5bdb", "#e67700", "#2b8a3e", "#c92a2a", "#7048e8", "#1098ad", "#d6336c", "#495057"]
TOP = 40  # bars and graph nodes shown at most (the tables list everyone)
plt.rcParams.update({"font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
                     "svg.fonttype": "none", "svg.hashsalt": "swarm"})  # fmt: skip


def _counts() -> MaxNLocator:
    """Ticks for counts: whole numbers only."""
    return MaxNLocator(integer=True)


def _span(*values: float | Sequence[float]) -> float:
    """The right end of a time axis: the largest value, at least a minute."""
    flat = [v for x in values for v in (x if isinstance(x, Sequence) else [x])]
    return max([1.0, *flat])


def to_svg(fig: Figure) -> str:
    out = io.StringIO()
    fig.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = out.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog: the SVG goes inside HTML


def minutes(times: Sequence[float], start: float) -> list[float]:
    return [(t - start) / 60 for t in times]


def pass_rate(runs: Sequence[RunMeasures], title: str = "Pass rate of main over time") -> str:
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for i, run in enumerate(runs):
        xs = minutes([p[0] for p in run.checkpoints], run.start)
        ys = [100 * p / t if t else 0 for _w, p, t in run.checkpoints]
        ax.step(xs, ys, where="post", color=COLORS[i % len(COLORS)], label=run.name, lw=1.8)
        ax.plot(xs, ys, "o", ms=3, color=COLORS[i % len(COLORS)])
        # Scorings that are not pass rates (tampered, incomplete): a cross on the time axis.
        for status, color in (("tampered", "#c92a2a"), ("incomplete", "#e67700")):
            times = [u[0] for u in run.unscored if u[2] == status]
            if times:
                label = f"{status} (not a pass rate)"
                ax.plot(minutes(times, run.start), [1] * len(times), "x", ms=7, mew=2,
                        color=color, label=label, clip_on=False)  # fmt: skip
    ax.set(xlabel="minutes since start", ylabel="hidden tests passed (%)", ylim=(0, 102),
           title=title)  # fmt: skip
    ax.set_xlim(
        0,
        _span(
            *(minutes([r.end], r.start)[0] for r in runs),
            *(minutes([p[0] for p in r.checkpoints], r.start) for r in runs),
        ),
    )
    ax.grid(alpha=0.3)
    if len(runs) > 1 or any(r.unscored for r in runs):
        ax.legend(frameon=False)
    return to_svg(fig)


def cumulative(run: RunMeasures) -> str:
    series = {
        "merges": run.merge_times,
        "claims": run.claim_times,
        "merge conflicts": run.conflict_times,
        "messages": run.message_times,
    }
    fig, axes = plt.subplots(1, 4, figsize=(11, 2.4))
    for (label, times), ax, color in zip(series.items(), axes, COLORS, strict=False):
        xs = minutes(sorted(times), run.start)
        ax.step([0, *xs], range(len(xs) + 1), where="post", color=color, lw=1.6)
        ax.set_title(f"{label} ({len(xs)})")
        ax.set_xlabel("minutes")
        # An empty series gets real axes (0 to the run's length, 0 to 1), not matplotlib's ±0.04.
        ax.set_xlim(0, _span(minutes([run.end], run.start)[0], xs))
        ax.set_ylim(0, max(1, len(xs)) * 1.05)
        ax.yaxis.set_major_locator(_counts())
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return to_svg(fig)


def per_worker(run: RunMeasures) -> str:
    ranked = sorted(run.per_worker.items(), key=lambda kv: -kv[1]["cost"])[:TOP]
    names = [n for n, _ in ranked]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, max(2.2, 0.22 * len(names) + 0.8)))
    a1.barh(names, [w["cost"] for _n, w in ranked], color=ACCENT)
    a1.set_title("cost per worker ($)")
    a2.barh(names, [w["tokens"] for _n, w in ranked], color=COLORS[1])
    a2.set_title("tokens per worker")
    a2.xaxis.set_major_locator(_counts())
    for ax in (a1, a2):
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return to_svg(fig)


def per_session(run: RunMeasures) -> str:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 2.4))
    bins = min(30, max(5, int(math.sqrt(len(run.session_costs) or 1))))
    a1.hist(run.session_costs or [0], bins=bins, color=ACCENT)
    a1.set_title(f"cost per session ($), {len(run.session_costs)} sessions")
    a2.hist(run.session_tokens or [0], bins=bins, color=COLORS[1])
    a2.set_title("tokens per session")
    a2.xaxis.set_major_locator(_counts())  # tokens are whole too
    for ax in (a1, a2):
        ax.yaxis.set_major_locator(_counts())  # sessions are counted in whole numbers
    fig.tight_layout()
    return to_svg(fig)


def message_graph(run: RunMeasures) -> str:
    """Who talks to whom: workers on a circle, a line per DM pair, thicker for more messages."""
    volume: dict[str, int] = {}
    for (a, b), n in run.dm_graph.items():
        volume[a] = volume.get(a, 0) + n
        volume[b] = volume.get(b, 0) + n
    for a, n in run.channel_posts.items():
        volume[a] = volume.get(a, 0) + n
    nodes = sorted(volume, key=lambda k: -volume[k])[:TOP]
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.set_axis_off()
    if not nodes:
        ax.text(0.5, 0.5, "no messages", ha="center")
        return to_svg(fig)
    pos = {n: (math.cos(2 * math.pi * i / len(nodes)), math.sin(2 * math.pi * i / len(nodes)))
           for i, n in enumerate(nodes)}  # fmt: skip
    heaviest = max(run.dm_graph.values(), default=1)
    for (a, b), n in run.dm_graph.items():
        if a in pos and b in pos:
            (x1, y1), (x2, y2) = pos[a], pos[b]
            ax.annotate("", xy=(x2, y2), xytext=(x1, y1), arrowprops={
                "arrowstyle": "-|>", "color": ACCENT, "alpha": 0.55,
                "lw": 0.6 + 3 * n / heaviest, "shrinkA": 9, "shrinkB": 9})  # fmt: skip
    biggest = max(volume.values())
    for who, (x, y) in pos.items():
        ax.scatter([x], [y], s=80 + 400 * volume[who] / biggest, color=COLORS[1], zorder=3)
        ax.text(x * 1.15, y * 1.15, who, ha="center", va="center", fontsize=8)
    ax.set_title("direct messages (arrow: sender → recipient)")
    ax.set_xlim(-1.35, 1.35)
    ax.set_ylim(-1.35, 1.35)
    return to_svg(fig)


def merged_whose(run: RunMeasures) -> str:
    """A matrix: rows merged the PRs written by columns (the diagonal is self-merges)."""
    people = sorted({p for pair in run.merged_whose for p in pair},
                    key=lambda n: (len(n), n))[:TOP]  # fmt: skip
    fig, ax = plt.subplots(figsize=(max(3.5, 0.3 * len(people) + 2),) * 2)
    if not people:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no merges", ha="center")
        return to_svg(fig)
    grid = [[run.merged_whose.get((by, author), 0) for author in people] for by in people]
    ax.imshow(grid, cmap="Blues")
    ax.set_xticks(range(len(people)), people, rotation=90)
    ax.set_yticks(range(len(people)), people)
    ax.set_xlabel("author of the PR")
    ax.set_ylabel("merged by")
    for i, row in enumerate(grid):
        for j, count in enumerate(row):
            if count:
                ax.text(j, i, str(count), ha="center", va="center", fontsize=7)
    ax.set_title("who merged whose work")
    return to_svg(fig)


def comparison_bars(runs: Sequence[RunMeasures], threshold: float) -> str:
    names = [r.name for r in runs]
    fig, axes = plt.subplots(1, 3, figsize=(11, 2.8))
    finals = [100 * (r.final_rate or 0) for r in runs]
    reach = [(r.time_to(threshold) or float("nan")) / 60 for r in runs]
    for ax, values, title, color in (
        (axes[0], finals, "final pass rate (%)", COLORS[0]),
        (axes[1], [r.cost for r in runs], "cost ($)", COLORS[1]),
        (axes[2], reach, f"minutes to reach {threshold:.0%}", COLORS[2]),
    ):
        ax.bar(names, values, color=color)
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=30)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return to_svg(fig)
