"""Read a test run's score from its output: pytest's summary or a plain `N passed, M failed`."""

from __future__ import annotations

import re
from typing import Literal

# A hidden test's outcome in one scoring.
TestOutcome = Literal["passed", "failed", "error", "skipped"]
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|xpassed|xfailed|skipped)\b")
_NO_TESTS = re.compile(r"\bno tests ran\b")


def parse_counts(output: str) -> tuple[int, int] | None:
    """(passed, total) from the last summary line in `output`, or None when there is none.

    Errors count as failures; skipped and xfailed tests are not counted in the total.
    """
    for line in reversed(output.splitlines()):
        counts: dict[str, int] = {}
        for number, kind in _COUNT.findall(line):
            key = "error" if kind.startswith("error") else kind
            counts[key] = counts.get(key, 0) + int(number)
        passed = counts.get("passed", 0) + counts.get("xpassed", 0)
        failed = counts.get("failed", 0) + counts.get("error", 0)
        if passed or failed or {"passed", "failed", "error"} & counts.keys():
            return passed, passed + failed
        if _NO_TESTS.search(line) or counts:
            return 0, 0
    return None


# pytest's short test summary (`-rA`): "PASSED path::test", "FAILED path::test - message".
_OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|XPASS|XFAIL) (\S.*?)(?: - .*)?$")
_OUTCOMES: dict[str, TestOutcome] = {
    "PASSED": "passed",
    "XPASS": "passed",
    "FAILED": "failed",
    "ERROR": "error",
    "XFAIL": "skipped",
}


def parse_tests(output: str) -> dict[str, TestOutcome]:
    """Each test's outcome by its node id, from pytest's `-rA` short test summary (empty when
    the output has none). A test listed twice (a failing test whose teardown errs) keeps the
    worse outcome."""
    rank = {"skipped": 0, "passed": 1, "failed": 2, "error": 3}
    found: dict[str, TestOutcome] = {}
    for line in output.splitlines():
        match = _OUTCOME.match(line)
        if match is None or "::" not in match.group(2):
            continue
        outcome = _OUTCOMES[match.group(1)]
        # A passing test has no message after it, so " - " there belongs to its id.
        test = line[len("PASSED ") :] if match.group(1) == "PASSED" else match.group(2)
        if test not in found or rank[outcome] > rank[found[test]]:
            found[test] = outcome
    return found
