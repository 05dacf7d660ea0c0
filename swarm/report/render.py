"""Turning measures into the report: sections of cards, figures and tables; HTML and Markdown."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from swarm.report import plots
from swarm.report.measures import RunMeasures, median

ROWS = 50  # rows per table in the report; the rest are counted


@dataclass
class Table:
    head: list[str]
    rows: list[list[Any]]
    more: int = 0

    @property
    def numeric(self) -> list[bool]:
        """Columns of numbers only: right-aligned, header included, so each number sits
        under its own header."""
        return [
            bool(self.rows)
            and all(isinstance(r[i], int | float) and not isinstance(r[i], bool) for r in self.rows)
            for i in range(len(self.head))
        ]


@dataclass
class Section:
    title: str
    note: str = ""
    cards: list[tuple[str, str]] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


def table(head: list[str], rows: list[list[Any]]) -> Table:
    return Table(head, rows[:ROWS], max(0, len(rows) - ROWS))


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def mins(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds / 60:.1f} min"


def run_sections(m: RunMeasures, *, figures: bool = True) -> list[Section]:
    """The single-run report."""
    merged = len(m.merge_times)
    progress = Section(
        "Progress",
        cards=[("final pass rate", pct(m.final_rate)), ("best pass rate", pct(m.best_rate)),
               ("merged PRs", str(merged)),
               ("merge commits on main", "—" if m.git_merges is None else str(m.git_merges)),
               ("workers", str(len(m.workers))), ("duration", mins(m.end - m.start)),
               ("mechanisms off", ", ".join(m.without) or "none (all on)"),
               ("cost", f"${m.cost:.2f}"), ("tokens", f"{m.tokens:,}")],
        figures=[plots.pass_rate([m]), plots.cumulative(m)] if figures else [],
    )  # fmt: skip
    failing = m.tests.get("failing", [])
    if m.tests.get("tests"):
        progress.cards.append(("hidden tests failing", f"{len(failing)} of {m.tests['tests']}"))
    if failing:
        progress.tables.append(table(
            ["hidden test still failing", "outcome", "failing since", "at commit", "passed once"],
            [[f["test"], f["outcome"], mins(f["since"] - m.start), f["since_commit"][:10],
              "yes" if f["ever_passed"] else "no"] for f in failing]))  # fmt: skip
    if m.unscored:
        kinds = {k: sum(1 for u in m.unscored if u[2] == k) for k in ("tampered", "incomplete")}
        progress.cards.append(
            (
                "checkpoints not scored",
                ", ".join(
                    [f"{n} {k}" for k, n in kinds.items() if n] or [f"{len(m.unscored)} error"]
                ),
            )
        )
        progress.tables.append(table(
            ["checkpoint not scored (not a pass rate)", "commit", "status", "reason"],
            [[mins(t - m.start), c[:10], st, r] for t, c, st, r in m.unscored]))  # fmt: skip
    progress.tables.append(table(["entry type", "count"], [[k, v] for k, v in
                                 sorted(m.entries_by_type.items())]))  # fmt: skip
    cost = Section("Cost and tokens", figures=[plots.per_worker(m), plots.per_session(m)]
                   if figures else [])  # fmt: skip
    cost.tables.append(table(
        ["worker", "role", "sessions", "steps", "tokens", "cost ($)"],
        [[n, m.roles.get(n, ""), int(w["sessions"]), int(w["steps"]), int(w["tokens"]),
          round(w["cost"], 4)] for n, w in sorted(m.per_worker.items(),
                                                   key=lambda kv: -kv[1]["cost"])]))  # fmt: skip
    collab = Section(
        "Collaboration",
        note="Duplicated work: two merged PRs of different authors that changed the same lines "
        "or the same symbols (a Python function, class or method), each PR against the point "
        "it started from, plus finished attempts thrown away because main already held their "
        "unit (sim runs). Repeated failures: failed attempts for a reason an earlier failed "
        "attempt had met before they began (sim runs). Claim to merge: from a claim to its "
        "owner's next merged PR (claims completed by a PATCH_SUMMARY).",
        cards=[("duplicated work", str(m.duplicated_work)),
               ("merge conflicts", str(m.conflicts)),
               ("repeated failures", "—" if m.repeated_failures is None
                else str(m.repeated_failures)),
               ("overlapping claim pairs", str(len(m.overlaps))),
               ("median claim → merge", mins(median(m.claim_to_merge))),
               ("reviews", str(sum(m.reviews_given.values()))),
               ("merged by someone else", str(sum(n for (by, a), n in m.merged_whose.items()
                                                  if by != a))),
               ("direct messages", str(sum(m.dm_graph.values())))],
        figures=[plots.merged_whose(m), plots.message_graph(m)] if figures else [],
    )  # fmt: skip
    collab.tables += [
        table(["overlapping claims ended as", "pairs"],
              [[k, v] for k, v in sorted(m.overlap_outcomes.items(), key=lambda kv: -kv[1])]),
        table(["PR", "and PR", "both changed"],
              [[f"#{d['a']}", f"#{d['b']}", ", ".join(d["what"]) + (
                  f" (+{d['count'] - len(d['what'])})" if d["count"] > len(d["what"]) else "")]
               for d in m.duplicated]),
        table(["worker", "reviews given", "reviews received", "merged others' PRs",
               "fixed others' FAILs", "role"],
              [[n, m.reviews_given.get(n, 0), m.reviews_received.get(n, 0),
                sum(c for (by, a), c in m.merged_whose.items() if by == n and a != n),
                m.extra.get("fixed_others", {}).get(n, 0), m.roles.get(n, "")]
               for n in m.workers]),
        table(["from", "to", "direct messages"],
              [[a, b, n] for (a, b), n in sorted(m.dm_graph.items(), key=lambda kv: -kv[1])]),
    ]  # fmt: skip
    return [progress, cost, collab]


def compare_sections(runs: Sequence[RunMeasures], threshold: float) -> list[Section]:
    """Several runs on one set of plots (e.g. 1, 8, 32, 128 workers on the same task)."""
    rows = [[r.name, len(r.workers), pct(r.final_rate), pct(r.best_rate),
             mins(r.time_to(threshold)), len(r.merge_times), round(r.cost, 2), r.tokens,
             mins(r.end - r.start)]
            for r in runs]  # fmt: skip
    return [
        Section("Pass rate over time", figures=[plots.pass_rate(runs, "Pass rate, all runs")]),
        Section("Outcome, cost and speed", figures=[plots.comparison_bars(runs, threshold)],
                tables=[table(["run", "workers", "final", "best", f"time to {threshold:.0%}",
                               "merges", "cost ($)", "tokens", "duration"], rows)]),
    ]  # fmt: skip


def html(title: str, subtitle: str, sections: list[Section]) -> str:
    env = Environment(
        loader=FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
    )
    return env.get_template("report.html").render(
        title=title,
        subtitle=subtitle,
        generated=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        sections=sections,
    )


def markdown(title: str, subtitle: str, sections: list[Section]) -> str:
    lines = [f"# {title}", "", subtitle, ""]
    for s in sections:
        lines += [f"## {s.title}", ""]
        if s.note:
            lines += [s.note, ""]
        lines += [f"- {label}: **{value}**" for label, value in s.cards]
        for t in s.tables:
            lines += ["", "| " + " | ".join(t.head) + " |", "|" + "---|" * len(t.head)]
            lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in t.rows]
            if t.more:
                lines.append(f"\n… and {t.more} more.")
        lines.append("")
    return "\n".join(lines)
