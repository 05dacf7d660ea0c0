"""Which hidden tests still fail on main, and since when: read from the checkpoints' results."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import inspect, select

from swarm.db import Database
from swarm.evaluation.schema import checkpoint_results, checkpoints


@dataclass(frozen=True)
class FailingTest:
    test: str
    outcome: str  # failed | error | skipped, in the newest scoring
    since: float  # when the streak of scorings without a pass that ends now began
    since_commit: str
    ever_passed: bool  # it passed once, then broke again


def still_failing(rows: Iterable[tuple[float, str, str, str]]) -> dict[str, Any]:
    """From (time, commit, status, tests as JSON) oldest first: the tests not passing in the
    newest scoring that listed tests, each with the start of its failing streak.

    Only real scores count ("scored" with tests listed): a tampered or crashed scoring says
    nothing about a test."""
    since: dict[str, tuple[float, str]] = {}
    passed_once: set[str] = set()
    latest: dict[str, str] = {}
    latest_time: float | None = None
    for when, commit, status, raw in rows:
        tests: dict[str, str] = json.loads(raw) if raw else {}
        if status != "scored" or not tests:
            continue
        for test, outcome in tests.items():
            if outcome == "passed":
                since.pop(test, None)
                passed_once.add(test)
            else:
                since.setdefault(test, (when, commit))
        latest, latest_time = tests, when
    failing = [
        FailingTest(test, outcome, *since[test], test in passed_once)
        for test, outcome in latest.items()
        if outcome != "passed"
    ]
    failing.sort(key=lambda f: (f.since, f.test))
    return {
        "scored_at": latest_time,
        "tests": len(latest),
        "passing": sum(1 for o in latest.values() if o == "passed"),
        "failing": [asdict(f) for f in failing],
    }


def failing_tests(db: Database) -> dict[str, Any]:
    """`still_failing` over every checkpoint of a run's database."""
    query = (
        select(checkpoints.c.time, checkpoints.c.commit, checkpoint_results.c.status,
               checkpoint_results.c.tests)
        .join(checkpoint_results, checkpoint_results.c.checkpoint_id == checkpoints.c.id)
        .order_by(checkpoints.c.time, checkpoints.c.id)
    )  # fmt: skip
    with db.read() as conn:
        if not inspect(conn).has_table("checkpoint_results"):  # a run recorded before it existed
            return still_failing([])
        return still_failing((r[0], r[1], r[2], r[3]) for r in conn.execute(query))
