"""Read a test run's score from its output: pytest's summary or a plain `N passed, M failed`."""

from __future__ import annotations

import re

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
