"""From what a scoring reported to a checkpoint's status: scored, tampered or incomplete.

- `tampered`: a canary (a test that must fail) passed: the code under test changed what the
  runner reports. Nothing of that scoring is a pass rate.
- `incomplete`: fewer hidden tests were collected than `[check]` pins (or pinned ids are
  missing), a hidden module did not collect, a canary was not run, or the runner reported no
  per-test results where it must. The count is kept, with the pinned total as its total.
- `scored`: none of that; `passed`/`total` are a pass rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from swarm.evaluation.canary import Canaries
from swarm.evaluation.parse import TestOutcome, parse_counts
from swarm.tasks.tables import TaskCheck

Status = Literal["scored", "tampered", "incomplete", "error"]
SHOWN = 3  # ids named in a reason; the rest are counted


@dataclass
class Verdict:
    status: Status
    passed: int
    total: int
    tests: dict[str, TestOutcome] = field(default_factory=dict)
    reason: str | None = None


def _some(ids: list[str]) -> str:
    shown = ", ".join(ids[:SHOWN])
    return shown + (f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else "")


def judge(
    output: str,
    outcomes: dict[str, TestOutcome] | None,
    canaries: Canaries,
    check: TaskCheck | None,
    *,
    per_test: bool,
) -> Verdict | None:
    """The verdict of a run that ended (None: it printed no result at all). `outcomes` are the
    per-test results (the pytest plugin's, or the runner's `PASSED id` lines); `per_test`: the
    runner must report them (pytest does)."""
    outcomes = outcomes or {}
    real = {t: o for t, o in outcomes.items() if not canaries.matches(t)}
    counts = parse_counts(output)
    if per_test and real:
        passed = sum(1 for o in real.values() if o == "passed")
        total = passed + sum(1 for o in real.values() if o in ("failed", "error"))
    elif counts is not None:
        planted = len(canaries.ids)
        passed, total = counts[0], max(counts[0], counts[1] - planted)
    else:
        return None
    reported = canaries.reported(outcomes)
    if reported["passed"]:
        reason = (
            f"{len(reported['passed'])} of {len(canaries.ids)} canary tests (tests that "
            f"must fail) passed ({_some(reported['passed'])}): the code under test changed what "
            "the test runner reports"
        )
        return Verdict("tampered", passed, total, real, reason)
    problems = []
    if per_test and not outcomes:
        problems.append("the test run reported no per-test results (it was cut short, or the "
                        "code under test stopped the evaluator's reporting)")  # fmt: skip
    elif reported["missing"]:
        problems.append(
            f"{len(reported['missing'])} of {len(canaries.ids)} canary tests did not run "
            f"({_some(reported['missing'])}): tests were deselected, or the runner reports no "
            "per-test results"
        )
    broken = sorted(t for t, o in real.items() if "::" not in t and o == "error")
    if broken:
        problems.append(f"{len(broken)} hidden test module(s) did not collect: {_some(broken)}")
    collected = {t for t in real if "::" in t}
    pinned_total = total
    if check is not None and check.tests is not None:
        pinned_total = max(total, check.tests)
        if len(collected) < check.tests:
            problems.append(
                f"{len(collected)} of the {check.tests} hidden tests pinned by [check].tests "
                "were collected"
            )
    if check is not None and check.test_ids is not None:
        missing = [t for t in check.pinned_ids() if t not in collected]
        if missing:
            problems.append(f"{len(missing)} pinned test ids were not reported: {_some(missing)}")
    if problems:
        return Verdict(
            "incomplete", passed, pinned_total, real, "incomplete: " + "; ".join(problems)
        )
    return Verdict("scored", passed, total, real)
