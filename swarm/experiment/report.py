"""`swarm report EXPERIMENT_DIR`: per configuration, means with 95% bootstrap intervals over
the repeats; each configuration against the baseline as a paired difference; what each
ablation costs; scaling curves with bands; the raw per-run figures as CSV; and warnings where
the compared runs differ in something the plan did not vary."""

from __future__ import annotations

import csv
import statistics
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from swarm.experiment.plan import Config, Plan, ablation_label
from swarm.experiment.state import DONE, FAILED, State
from swarm.experiment.stats import Interval, bootstrap_mean, difference
from swarm.provenance import MACHINE_KEYS, read_provenance
from swarm.report.render import Section, Table, table

# (figure, label, how a value is shown: scale and digits)
MEASURES: tuple[tuple[str, str, float, int], ...] = (
    ("final_pass_rate", "final pass rate (%)", 100.0, 1),
    ("time_to_50", "time to 50% (s)", 1.0, 0),
    ("time_to_90", "time to 90% (s)", 1.0, 0),
    ("time_to_best", "time to best (s)", 1.0, 0),
    ("time_to_all", "time to all (s)", 1.0, 0),
    ("cost", "cost ($)", 1.0, 2),
    ("tokens", "tokens", 1.0, 0),
    ("cost_per_merged", "cost per merged unit ($)", 1.0, 3),
    ("duplicated_work", "duplicated work", 1.0, 1),
    ("conflicts", "conflicts", 1.0, 1),
    ("conflict_resolution", "conflict resolution (s)", 1.0, 0),
    ("repeated_failures", "repeated failures", 1.0, 1),
    ("failed_attempts", "failed attempts", 1.0, 1),
    ("merged_prs", "merged PRs", 1.0, 1),
    ("duration", "duration (s)", 1.0, 0),
)
LABELS = {name: (label, scale, digits) for name, label, scale, digits in MEASURES}
TABLES = (
    ("Progress", ("final_pass_rate", "time_to_50", "time_to_90", "time_to_best", "time_to_all")),
    ("Collaboration", ("duplicated_work", "conflicts", "conflict_resolution",
                       "repeated_failures", "failed_attempts")),
    ("Cost", ("cost", "tokens", "cost_per_merged", "merged_prs", "duration")),
)  # fmt: skip
COMPARED = ("final_pass_rate", "time_to_all", "time_to_50", "duplicated_work", "conflicts",
            "repeated_failures", "cost")  # fmt: skip
SCALING = ("time_to_all", "time_to_50", "duplicated_work", "repeated_failures", "conflicts",
           "final_pass_rate")  # fmt: skip


@dataclass
class RunRow:
    id: str
    config: Config
    seed: int
    wall: float
    figures: dict[str, float | None]
    provenance: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExperimentReport:
    plan: Plan
    rows: list[RunRow]
    failed: list[str]
    missing: int
    warnings: list[str]


def run_figures(run_dir: Path) -> dict[str, float | None]:
    """The run's measures (swarm.report.measures) and those only an experiment reads: time to
    the best pass rate, cost per merged unit, and the median time from a PR's first conflict
    with main to its merge."""
    from swarm.report.measures import measure
    from swarm.report.source import open_run
    from swarm.workspace.schema import pr_events, pull_requests

    with open_run(run_dir) as source:
        m = measure(source)
        with source.db.read() as conn:
            rows = conn.execute(
                select(pr_events.c.number, func.min(pr_events.c.created_at),
                       pull_requests.c.merged_at)
                .join(pull_requests, pull_requests.c.number == pr_events.c.number)
                .where(pr_events.c.kind == "conflict")
                .group_by(pr_events.c.number, pull_requests.c.merged_at)
            ).all()  # fmt: skip
    figures: dict[str, float | None] = {k: (None if v is None else float(v))
                                        for k, v in m.figures().items()}  # fmt: skip
    best = m.best_rate
    figures["time_to_best"] = m.time_to(best) if best is not None else None
    merged = len(m.merge_times)
    figures["cost_per_merged"] = m.cost / merged if merged else None
    waits = [float(merged_at) - float(first) for _n, first, merged_at in rows if merged_at]
    figures["conflict_resolution"] = statistics.median(waits) if waits else None
    return figures


def collect(state: State, plan: Plan) -> ExperimentReport:
    rows: list[RunRow] = []
    failed: list[str] = []
    missing = 0
    for spec in plan.runs():
        record = state.runs.get(spec.id)
        if record is None:
            missing += 1
            continue
        if record["status"] == FAILED:
            failed.append(spec.id)
            continue
        if record["status"] != DONE:
            missing += 1
            continue
        run_dir = state.dir / record["run_dir"]
        rows.append(RunRow(spec.id, spec.config, spec.seed, float(record["wall"]),
                           run_figures(run_dir), read_provenance(run_dir)))  # fmt: skip
    return ExperimentReport(plan, rows, failed, missing, reproducibility(plan, rows))


def _distinct(rows: Sequence[RunRow], key: str) -> Counter[str]:
    return Counter(_show(r.provenance[key]) for r in rows if key in r.provenance)


def _show(value: Any) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def reproducibility(plan: Plan, rows: Sequence[RunRow]) -> list[str]:
    """Where compared runs differ in something the plan did not vary: the machine, swarm's
    version and the prompt across all runs; the task (its options) within a task and seed; the
    harness's version and the models within a setup."""
    warnings: list[str] = []
    bare = [r.id for r in rows if not r.provenance]
    if bare:
        warnings.append(f"{len(bare)} run(s) record no provenance (made by an older swarm), so "
                        f"they cannot be checked: {', '.join(bare[:5])}")  # fmt: skip

    def check(what: str, groups: dict[Any, list[RunRow]], keys: Sequence[str]) -> None:
        for group, members in groups.items():
            for key in keys:
                seen = _distinct(members, key)
                if len(seen) > 1:
                    values = "; ".join(f"{v} ({n} runs)" for v, n in seen.most_common())
                    where = f" {what} {group}" if what else ""
                    warnings.append(f"runs{where} differ in {key}, which the plan did not vary: "
                                    f"{values}")  # fmt: skip

    check("", {"": list(rows)}, MACHINE_KEYS)
    by_task_seed: dict[Any, list[RunRow]] = {}
    by_setup: dict[Any, list[RunRow]] = {}
    for r in rows:
        by_task_seed.setdefault(f"{r.config.task} seed {r.seed}", []).append(r)
        by_setup.setdefault(r.config.setup, []).append(r)
    check("of task", by_task_seed, ("task_sha256",))
    check("of setup", by_setup, ("harness_version", "models_reported"))
    return warnings


def _by_config(rows: Sequence[RunRow]) -> dict[Config, list[RunRow]]:
    out: dict[Config, list[RunRow]] = {}
    for r in rows:
        out.setdefault(r.config, []).append(r)
    return out


def _cell(found: Interval | None, name: str, mark: bool = False) -> str:
    if found is None:
        return "—"
    _label, scale, digits = LABELS[name]
    return found.text(digits, scale) + (" *" if mark and found.excludes_zero else "")


def _keyed(rows: Sequence[RunRow], name: str,
           key: Callable[[RunRow], Hashable]) -> dict[Hashable, float | None]:  # fmt: skip
    return {key(r): r.figures.get(name) for r in rows}


def sections(report: ExperimentReport, *, figures: bool = True) -> list[Section]:
    plan, rows = report.plan, report.rows
    grouped = _by_config(rows)
    configs = [c for c in plan.configs if c in grouped]
    total = len(plan.runs())
    overview = Section(
        "Experiment",
        note="Each cell: the mean over the configuration's repeats and its 95% interval "
        "(percentile bootstrap over the repeats, 10,000 resamples, fixed seed). A time is "
        "averaged over the runs that reached it; n of a single value is shown instead of an "
        "interval. Raw per-run figures: runs.csv.",
        cards=[("runs finished", f"{len(rows)} of {total}"), ("failed", str(len(report.failed))),
               ("not run yet", str(report.missing)), ("configurations", str(len(plan.configs))),
               ("seeds", ", ".join(map(str, plan.seeds))),
               ("baseline", f"{ablation_label(plan.baseline_without)} · {plan.baseline_setup}")],
    )  # fmt: skip
    if report.warnings:
        overview.tables.append(table(["reproducibility warning"], [[w] for w in report.warnings]))
    out = [overview]
    for title, names in TABLES:
        out.append(Section(f"Per configuration: {title.lower()}", tables=[table(
            ["configuration", "runs", *(LABELS[n][0] for n in names)],
            [[c.label, len(grouped[c]), *(_cell(bootstrap_mean(
                [r.figures.get(n) for r in grouped[c]]), n) for n in names)]
             for c in configs])]))  # fmt: skip
    seed_key: Callable[[RunRow], Hashable] = lambda r: (r.config.task, r.seed)  # noqa: E731
    versus = []
    for c in configs:
        base = plan.baseline_of(c)
        if c == base or base not in grouped:
            continue
        pairs = len({seed_key(r) for r in grouped[c]} & {seed_key(r) for r in grouped[base]})
        versus.append([c.label, pairs, *(_cell(difference(
            _keyed(grouped[c], n, seed_key), _keyed(grouped[base], n, seed_key)), n, mark=True)
            for n in COMPARED)])  # fmt: skip
    out.append(Section(
        "Against the baseline",
        note="Each configuration minus the baseline's ablation and setup at the same task and "
        "number of workers: the mean of the differences paired by task and seed, with its 95% "
        "bootstrap interval (* : the interval excludes 0).",
        tables=[table(["configuration", "pairs", *(LABELS[n][0] for n in COMPARED)], versus)],
    ))  # fmt: skip
    out.append(ablation_costs(plan, rows))
    if figures and len(plan.workers) > 1:
        out.append(Section("Scaling", note="Means over the repeats against the number of "
                           "workers, with the 95% bootstrap interval as a band.",
                           figures=[scaling_plot(plan, grouped, n) for n in SCALING]))  # fmt: skip
    return out


def ablation_costs(plan: Plan, rows: Sequence[RunRow]) -> Section:
    """Per ablation (at the baseline's setup), pooled over tasks and numbers of workers: the
    differences to all-on paired by (task, workers, seed)."""
    key: Callable[[RunRow], Hashable] = lambda r: (r.config.task, r.config.workers, r.seed)  # noqa: E731
    at_setup = [r for r in rows if r.config.setup == plan.baseline_setup]
    base = [r for r in at_setup if r.config.without == plan.baseline_without]
    body: list[list[Any]] = []
    for off in plan.without:
        if off == plan.baseline_without:
            continue
        these = [r for r in at_setup if r.config.without == off]
        pairs = len({key(r) for r in these} & {key(r) for r in base})
        cells = [_cell(difference(_keyed(these, n, key), _keyed(base, n, key)), n, mark=True)
                 for n in COMPARED]  # fmt: skip
        body.append([ablation_label(off), pairs, *cells])
    return Section(
        "What each ablation costs",
        note=f"Each ablation minus {ablation_label(plan.baseline_without)}, pooled over tasks "
        "and numbers of workers (pairs: the same task, workers and seed); * : the 95% "
        "interval excludes 0.",
        tables=[table(["ablation", "pairs", *(LABELS[n][0] for n in COMPARED)], body)],
    )


def scaling_plot(plan: Plan, grouped: dict[Config, list[RunRow]], name: str) -> str:
    import matplotlib.pyplot as plt

    from swarm.report.plots import COLORS, to_svg

    label, scale, _digits = LABELS[name]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    lines = sorted({(c.task, c.setup, c.without) for c in grouped})
    for i, (task, setup, off) in enumerate(lines):
        xs, ys, lows, highs = [], [], [], []
        for w in plan.workers:
            found = bootstrap_mean([r.figures.get(name) for r in
                                    grouped.get(Config(task, setup, w, off), [])])  # fmt: skip
            if found is None:
                continue
            xs.append(w)
            ys.append(found.mean * scale)
            lows.append((found.low if found.low is not None else found.mean) * scale)
            highs.append((found.high if found.high is not None else found.mean) * scale)
        color = COLORS[i % len(COLORS)]
        tag = ablation_label(off) + ("" if len(plan.setups) == 1 else f" · {setup}") + (
            "" if len(plan.tasks) == 1 else f" · {task}")  # fmt: skip
        ax.plot(xs, ys, "o-", color=color, label=tag, lw=1.6, ms=4)
        ax.fill_between(xs, lows, highs, color=color, alpha=0.15)
    ax.set_xscale("log", base=2)
    ax.set_xticks(plan.workers, [str(w) for w in plan.workers])
    ax.set(xlabel="workers", ylabel=label, title=label)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False, fontsize=7)
    return to_svg(fig)


def write_csv(report: ExperimentReport, path: Path) -> None:
    names = [n for n, *_ in MEASURES]
    keys = sorted({k for r in report.rows for k in r.provenance})
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["run", "task", "setup", "workers", "without", "seed", "wall", *names,
                         *(f"provenance.{k}" for k in keys)])  # fmt: skip
        for r in report.rows:
            writer.writerow([r.id, r.config.task, r.config.setup, r.config.workers,
                             ",".join(r.config.without), r.seed, round(r.wall, 1),
                             *("" if r.figures.get(n) is None else r.figures[n] for n in names),
                             *(_show(r.provenance.get(k, "")) for k in keys)])  # fmt: skip


def write_report(directory: Path, out: Path | None = None) -> tuple[Path, Path, Path, list[str]]:
    """Write the experiment's HTML, Markdown and CSV; answers their paths and the warnings."""
    from swarm.experiment.state import read_state
    from swarm.report import render

    state = read_state(directory)
    plan = state.load_plan()
    report = collect(state, plan)
    html_path = out or directory / "report.html"
    md_path = html_path.with_suffix(".md")
    csv_path = html_path.with_name(html_path.stem + "-runs.csv") if out else directory / "runs.csv"
    title = f"swarm experiment {plan.name}"
    subtitle = (f"{len(report.rows)} runs of {len(plan.runs())}: tasks {', '.join(plan.tasks)}; "
                f"workers {', '.join(map(str, plan.workers))}; "
                f"{', '.join(ablation_label(w) for w in plan.without)}; "
                f"setups {', '.join(s.name for s in plan.setups)}; seeds "
                f"{', '.join(map(str, plan.seeds))}.")  # fmt: skip
    found = sections(report)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(render.html(title, subtitle, found), encoding="utf-8")
    md_path.write_text(render.markdown(title, subtitle, found), encoding="utf-8")
    write_csv(report, csv_path)
    return html_path, md_path, csv_path, report.warnings


__all__ = ["ExperimentReport", "Table", "collect", "sections", "write_report"]
