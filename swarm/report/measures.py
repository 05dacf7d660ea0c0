"""What a run did, measured from its database and repository: progress, cost, collaboration."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2
from sqlalchemy import Connection, func, inspect, literal, select

from swarm.context import scope as scopes
from swarm.context.schema import claims, entries, entry_refs, workers
from swarm.evaluation.history import failing_tests
from swarm.evaluation.schema import checkpoint_results, checkpoints
from swarm.messages.schema import messages
from swarm.report.attempts import read_attempts, repeated_failures, thrown_away
from swarm.report.source import RunSource
from swarm.worker.schema import sessions
from swarm.workspace.schema import pr_events, pull_requests, reviews

MERGE_PREFIX = "Merge PR #"
CLAIM_TO_MERGE_SLACK = 600.0  # a merge this soon after a claim ended still counts as its result


@dataclass
class RunMeasures:
    name: str
    start: float
    end: float
    workers: list[str]
    checkpoints: list[tuple[float, int, int]]
    merge_times: list[float]
    git_merges: int | None
    claim_times: list[float]
    conflict_times: list[float]
    message_times: list[float]
    entries_by_type: dict[str, int]
    per_worker: dict[str, dict[str, float]]
    session_costs: list[float]
    session_tokens: list[int]
    duplicated: list[dict[str, Any]]
    overlaps: list[dict[str, Any]]
    overlap_outcomes: dict[str, int]
    claim_to_merge: list[float]
    reviews_given: dict[str, int]
    reviews_received: dict[str, int]
    merged_whose: dict[tuple[str, str], int]
    dm_graph: dict[tuple[str, str], int]
    channel_posts: dict[str, int]
    roles: dict[str, str]
    extra: dict[str, Any] = field(default_factory=dict)
    # The hidden tests main still fails and since when (see swarm.evaluation.history).
    tests: dict[str, Any] = field(default_factory=dict)
    # Checkpoints that are not pass rates (tampered, incomplete, error): (time, commit,
    # status, reason). `checkpoints` holds the scored ones only.
    unscored: list[tuple[float, str, str, str]] = field(default_factory=list)
    # The sim's record of its attempts (swarm.report.attempts), None when the run kept none.
    attempts: list[dict[str, Any]] | None = None
    without: tuple[str, ...] = ()  # the mechanisms the run was without (swarm.switches)

    # -- the per-run measures an experiment reads by name (docs/experiments.md) -------------
    @property
    def duplicated_work(self) -> int:
        """Pieces of work done twice: pairs of merged PRs of different authors that changed
        the same lines or symbols, plus finished attempts thrown away because main already
        held their unit (in the sim's record of attempts)."""
        return len(self.duplicated) + (thrown_away(self.attempts) if self.attempts else 0)

    @property
    def conflicts(self) -> int:
        """Merges the hub refused because the PR conflicted with main."""
        return len(self.conflict_times)

    @property
    def repeated_failures(self) -> int | None:
        """Failed attempts for a reason an earlier failed attempt had met before they began;
        None for a run without a record of its attempts (not available, not 0)."""
        return None if self.attempts is None else repeated_failures(self.attempts)

    def figures(self) -> dict[str, float | int | None]:
        """Every per-run measure by name; None where the run cannot tell."""
        failed = None if self.attempts is None else sum(
            1 for a in self.attempts if a["outcome"] == "failed")  # fmt: skip
        return {
            "final_pass_rate": self.final_rate,
            "best_pass_rate": self.best_rate,
            "time_to_50": self.time_to(0.5),
            "time_to_90": self.time_to(0.9),
            "time_to_all": self.time_to(1.0),
            "duration": self.end - self.start,
            "merged_prs": len(self.merge_times),
            "cost": self.cost,
            "tokens": self.tokens,
            "duplicated_work": self.duplicated_work,
            "conflicts": self.conflicts,
            "repeated_failures": self.repeated_failures,
            "failed_attempts": failed,
            "overlapping_claims": len(self.overlaps),
            "direct_messages": sum(self.dm_graph.values()),
        }

    @property
    def final_rate(self) -> float | None:
        last = self.checkpoints[-1] if self.checkpoints else None
        return last[1] / last[2] if last and last[2] else None

    @property
    def best_rate(self) -> float | None:
        rates = [p / t for _w, p, t in self.checkpoints if t]
        return max(rates) if rates else None

    @property
    def cost(self) -> float:
        return sum(w["cost"] for w in self.per_worker.values())

    @property
    def tokens(self) -> int:
        return int(sum(w["tokens"] for w in self.per_worker.values()))

    def time_to(self, rate: float) -> float | None:
        """Seconds from the start until main first reached `rate` (0..1), or None."""
        for when, passed, total in self.checkpoints:
            if total and passed / total >= rate:
                return when - self.start
        return None


def git_merge_count(git_dir: Path | None) -> int | None:
    """Merge commits on main's first-parent history that the workspace made for a PR."""
    if git_dir is None:
        return None
    repo = pygit2.Repository(str(git_dir))
    ref = repo.references.get("refs/heads/main")
    if ref is None:
        return 0
    walker = repo.walk(ref.resolve().target, pygit2.enums.SortMode.TOPOLOGICAL)
    walker.simplify_first_parent()
    return sum(1 for c in walker if len(c.parents) == 2 and c.message.startswith(MERGE_PREFIX))


def measure(source: RunSource) -> RunMeasures:
    """Every figure of the report, read from one run."""
    with source.db.read() as conn:
        names = {int(i): str(n) for i, n in conn.execute(select(workers.c.id, workers.c.name))}
        points, unscored = _checkpoints(conn)
        prs = conn.execute(select(pull_requests).order_by(pull_requests.c.number)).all()
        conflict_times = [float(t) for (t,) in conn.execute(
            select(pr_events.c.created_at).where(pr_events.c.kind == "conflict"))]  # fmt: skip
        claim_rows = conn.execute(select(claims).order_by(claims.c.id)).all()
        message_rows = conn.execute(
            select(messages.c.created_at, messages.c.author, messages.c.channel,
                   messages.c.recipient_id)
        ).all()  # fmt: skip
        by_type = {str(t): int(n) for t, n in conn.execute(
            select(entries.c.type, func.count()).group_by(entries.c.type))}  # fmt: skip
        session_rows = conn.execute(select(sessions)).all()
        review_rows = conn.execute(
            select(reviews.c.author, pull_requests.c.author.label("pr_author")).join(
                pull_requests, pull_requests.c.number == reviews.c.number
            )
        ).all()
        patches = conn.execute(
            select(entries.c.id, entries.c.author_id, entries.c.scope, entries.c.created_at)
            .where(entries.c.type == "PATCH_SUMMARY")
        ).all()  # fmt: skip
        fixes = conn.execute(
            select(entries.c.author_id, func.count())
            .select_from(entries)
            .join(entry_refs, entry_refs.c.entry_id == entries.c.id)
            .join(target := entries.alias("target"), target.c.id == entry_refs.c.ref_id)
            .where(entries.c.type == "PATCH_SUMMARY", target.c.type == "FAIL",
                   target.c.author_id != entries.c.author_id)
            .group_by(entries.c.author_id)
        ).all()  # fmt: skip
        first_entry = conn.execute(select(func.min(entries.c.created_at))).scalar()
        last_entry = conn.execute(select(func.max(entries.c.created_at))).scalar()

    times = [t for t in (source.info.started_at, first_entry, *(p[0] for p in points[:1])) if t]
    start = float(min(times)) if times else 0.0
    ends = [t for t in (source.info.ended_at, last_entry, *(p[0] for p in points[-1:])) if t]
    end = float(max(ends)) if ends else start

    per_worker: dict[str, dict[str, float]] = {
        n: {"cost": 0.0, "tokens": 0, "sessions": 0, "steps": 0} for n in names.values()
    }
    for s in session_rows:
        w = per_worker[names[s.worker_id]]
        w["cost"] += float(s.cost)
        w["tokens"] += int(s.tokens_in + s.tokens_out)
        w["sessions"] += 1
        w["steps"] += int(s.steps)

    merged = [p for p in prs if p.state == "merged" and p.merged_at is not None]
    overlaps, outcomes = _claim_overlaps(claim_rows, names, source.db.engine.dialect.name)
    dm_graph: Counter[tuple[str, str]] = Counter()
    channel_posts: Counter[str] = Counter()
    for m in message_rows:
        if m.recipient_id is not None:
            dm_graph[(m.author, names.get(m.recipient_id, "?"))] += 1
        elif m.channel is not None:
            channel_posts[m.author] += 1
    merged_whose = Counter((str(p.merged_by), str(p.author)) for p in merged)
    given = Counter(str(r.author) for r in review_rows)
    received = Counter(str(r.pr_author) for r in review_rows)
    fixed_others = {names[a]: int(n) for a, n in fixes}
    roles = _roles(per_worker, merged_whose, given, fixed_others, by_author_patch(patches, names))
    return RunMeasures(
        name=source.name,
        start=start,
        end=end,
        workers=list(names.values()),
        checkpoints=points,
        merge_times=sorted(float(p.merged_at) for p in merged),
        git_merges=git_merge_count(source.git_dir),
        claim_times=[float(c.created_at) for c in claim_rows],
        conflict_times=sorted(conflict_times),
        message_times=sorted(float(m.created_at) for m in message_rows),
        entries_by_type=by_type,
        per_worker=per_worker,
        session_costs=[float(s.cost) for s in session_rows],
        session_tokens=[int(s.tokens_in + s.tokens_out) for s in session_rows],
        duplicated=_duplicated(merged, source.git_dir),
        overlaps=overlaps,
        overlap_outcomes=dict(outcomes),
        claim_to_merge=_claim_to_merge(claim_rows, merged, names),
        reviews_given=dict(given),
        reviews_received=dict(received),
        merged_whose=dict(merged_whose),
        dm_graph=dict(dm_graph),
        channel_posts=dict(channel_posts),
        roles=roles,
        extra={"fixed_others": fixed_others},
        tests=failing_tests(source.db),
        unscored=unscored,
        attempts=read_attempts(source.run_dir),
        without=source.info.without,
    )


def _checkpoints(
    conn: Connection,
) -> tuple[list[tuple[float, int, int]], list[tuple[float, str, str, str]]]:
    """The scored checkpoints as (time, passed, total), and the others as (time, commit,
    status, reason): a tampered or incomplete scoring is not a pass rate."""
    if inspect(conn).has_table("checkpoint_results"):
        query = select(checkpoints, checkpoint_results.c.status).outerjoin(
            checkpoint_results, checkpoint_results.c.checkpoint_id == checkpoints.c.id
        )
    else:  # a run recorded before statuses existed
        query = select(checkpoints, literal(None).label("status"))
    points, others = [], []
    for r in conn.execute(query.order_by(checkpoints.c.time, checkpoints.c.id)):
        status = r.status or ("scored" if r.reason is None else "error")
        if status == "scored":
            points.append((float(r.time), int(r.passed), int(r.total)))
        else:
            others.append((float(r.time), str(r.commit), str(status), str(r.reason or "")))
    return points, others


def by_author_patch(patches: Sequence[Any], names: dict[int, str]) -> Counter[str]:
    return Counter(names[p.author_id] for p in patches)


def _claim_overlaps(
    rows: Sequence[Any], names: dict[int, str], _dialect: str
) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Pairs of claims by different owners that were open at the same time on overlapping
    scopes, and how each pair ended (a sweep over time: each claim meets only the open ones)."""
    found: list[dict[str, Any]] = []
    outcomes: Counter[str] = Counter()
    open_: list[Any] = []
    for claim in sorted(rows, key=lambda r: r.created_at):
        open_ = [c for c in open_ if _until(c) > claim.created_at]
        items = claim.scope.split("\n")
        for other in open_:
            if other.owner_id != claim.owner_id and scopes.overlaps(items, other.scope.split("\n")):
                ends = sorted((_end(other), _end(claim)))
                outcome = " + ".join(ends)
                outcomes[outcome] += 1
                found.append({"first": other.id, "second": claim.id,
                              "owners": (names[other.owner_id], names[claim.owner_id]),
                              "outcome": outcome})  # fmt: skip
        open_.append(claim)
    return found, outcomes


def _until(claim: Any) -> float:
    return float(claim.ended_at if claim.ended_at is not None else claim.lease_until)


def _end(claim: Any) -> str:
    return str(claim.end_reason or "not ended")


def _duplicated(merged: list[Any], git_dir: Path | None) -> list[dict[str, Any]]:
    """Merged PRs of different authors that changed the same lines or symbols: work that was
    done twice (or redone)."""
    from swarm.report.changes import duplicated_changes

    return duplicated_changes(git_dir, merged) if git_dir is not None else []


def _claim_to_merge(
    claim_rows: Sequence[Any], merged: list[Any], names: dict[int, str]
) -> list[float]:
    """For each completed claim: seconds until its owner's first PR merge after the claim."""
    merges: dict[str, list[float]] = {}
    for pr in merged:
        merges.setdefault(str(pr.author), []).append(float(pr.merged_at))
    out = []
    for c in claim_rows:
        if c.end_reason != "completed":
            continue
        limit = float(c.ended_at or c.lease_until) + CLAIM_TO_MERGE_SLACK
        after = [t for t in merges.get(names[c.owner_id], []) if c.created_at <= t <= limit]
        if after:
            out.append(min(after) - float(c.created_at))
    return sorted(out)


def _roles(
    per_worker: dict[str, dict[str, float]],
    merged_whose: Counter[tuple[str, str]],
    given: Counter[str],
    fixed_others: dict[str, int],
    patches: Counter[str],
) -> dict[str, str]:
    """The habit that stands out in each worker's record: integrator (merges others' PRs),
    reviewer, fixer (patches others' FAILs), builder (own patches), or quiet."""
    integrations = Counter(by for (by, author), n in merged_whose.items() if by != author
                           for _ in range(n))  # fmt: skip
    roles = {}
    for name in per_worker:
        scores = {
            "integrator": integrations[name] * 2,
            "reviewer": given[name],
            "fixer": fixed_others.get(name, 0) * 2,
            "builder": patches[name],
        }
        best = max(scores, key=lambda k: scores[k])
        roles[name] = best if scores[best] > 0 else "quiet"
    return roles


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
