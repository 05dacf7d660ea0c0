"""Run pytest so that the code under test cannot configure it, and read each test's outcome.

What pytest would otherwise take from the repository it runs in, and what stops it here:

- `pytest.ini`, `.pytest.ini`, `pyproject.toml [tool.pytest.ini_options]`, `tox.ini`,
  `setup.cfg` (addopts, python_files, plugins...): pytest uses the ini file given with `-c`
  and reads no other; ours is empty, or the task's own `pytest.ini` from its hidden tests.
- `conftest.py` files: pytest loads those of the test paths it is given and of their parent
  folders up to `--confcutdir`, plus those of folders it collects. The hidden tests live outside
  the checkout and `--rootdir`/`--confcutdir` are the hidden tests' folder, so the hidden tests'
  own conftest files load and none of the checkout's does.
- plugins installed by the code (a `pytest11` entry point, e.g. a `*.dist-info` in the checkout,
  which is on `sys.path`): `PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`; a task that needs a plugin names
  it with `-p` in its eval command.
- `PYTEST_ADDOPTS`/`PYTEST_PLUGINS` of the caller: the environment is the evaluator's own.

What this cannot stop is code that runs inside the pytest process (the package's own
`__init__.py` is imported by the tests) and rewrites what pytest reports: canaries catch that
(swarm.evaluation.canary).
"""

from __future__ import annotations

import json
import secrets
import shlex
from collections.abc import Iterable
from pathlib import Path

from swarm.evaluation.parse import TestOutcome

# The pytest plugin of one scoring: it writes each report as one JSON line.
_PLUGIN = '''"""What pytest reports, one JSON line per report (from swarm's evaluator)."""
import json

_OUT = open({out!r}, "a", encoding="utf-8", buffering=1)


def _write(report, when):
    _OUT.write(json.dumps({{"id": report.nodeid, "when": when, "outcome": report.outcome,
                           "xfail": hasattr(report, "wasxfail")}}) + "\\n")


def pytest_collectreport(report):
    if not report.passed:
        _write(report, "collect")


def pytest_runtest_logreport(report):
    _write(report, report.when)
'''
TASK_INI = "pytest.ini"  # the hidden tests' own ini file, used instead of the empty one


def pytest_settings(hidden: Path, conf: Path, results: Path) -> dict[str, str]:
    """Write this scoring's ini file and reporting plugin into `conf` and return the
    environment that makes pytest use them (and nothing of the checkout)."""
    conf.mkdir(parents=True, exist_ok=True)
    ini = hidden / TASK_INI
    if not ini.is_file():
        ini = conf / "pytest.ini"
        ini.write_text("[pytest]\n", encoding="utf-8")
    # A name of its own per scoring: a module of the checkout (first on sys.path with
    # `python -m pytest`) cannot stand in for it.
    plugin = f"_swarm_score_{secrets.token_hex(6)}"
    (conf / f"{plugin}.py").write_text(_PLUGIN.format(out=str(results)), encoding="utf-8")
    options = [
        "-c", str(ini), "--rootdir", str(hidden), "--confcutdir", str(hidden),
        "-p", "no:cacheprovider", "-p", plugin, "--continue-on-collection-errors", "-rfE",
    ]  # fmt: skip
    return {
        "PYTEST_ADDOPTS": shlex.join(options),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONPATH": str(conf),
    }


def read_results(lines: Iterable[str]) -> dict[str, TestOutcome]:
    """Each test's outcome from the plugin's lines: a set-up or teardown that broke (or a
    module that did not collect: its own id) is an error, else the test's call decides; a
    test skipped in its set-up (or a module skipped as a whole) is skipped; an expected
    failure (xfail) is skipped."""
    phases: dict[str, dict[str, str]] = {}
    for line in lines:
        try:
            record = json.loads(line)
            test, when, outcome = str(record["id"]), str(record["when"]), str(record["outcome"])
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a killed run
        seen = phases.setdefault(test or ".", {})
        if when not in seen or outcome == "failed":
            seen[when] = outcome
    found: dict[str, TestOutcome] = {}
    for test, seen in phases.items():
        if "failed" in (seen.get("setup"), seen.get("teardown"), seen.get("collect")):
            found[test] = "error"
        elif "call" in seen:
            call = seen["call"]
            found[test] = (
                "passed" if call == "passed" else "skipped" if call == "skipped" else "failed"
            )
        elif "skipped" in (seen.get("setup"), seen.get("collect")):
            found[test] = "skipped"
        else:
            found[test] = "error"  # set up, never called: the run was cut short
    return found


def read_results_file(path: Path) -> dict[str, TestOutcome] | None:
    """`read_results` of the file the plugin wrote, or None when it wrote none."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return read_results(text.splitlines())
