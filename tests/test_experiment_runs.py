"""`swarm experiment` for real (sim runs: hub, workers, git, evaluator): a grid interrupted by
Ctrl-C midway and resumed (two runs at a time) redoes only its unfinished runs; `swarm report`
on it gives the statistics, the CSV and a warning when the runs differ in something the plan
did not vary."""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.test_hazard import EXAMPLE

SWARM = str(Path(sys.executable).parent / "swarm")
PLAN = """name = "tiny"
task = "{task}"
workers = [2]
without = ["", "claims", "dms"]
seeds = [1]
[run]
budget = "4m"
think = 0.2
eval_every = "2s"
[prepare_options]
units = 3
"""


def state(directory: Path) -> dict[str, dict[str, object]]:
    path = directory / "experiment.json"
    runs: dict[str, dict[str, object]] = json.loads(path.read_text())["runs"] if path.exists() \
        else {}  # fmt: skip
    return runs


def wait_for(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_interrupted_grid_resumes_with_only_its_unfinished_runs_and_is_reported(
    tmp_path: Path,
) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(task=EXAMPLE))
    exp = tmp_path / "exp"
    command = [SWARM, "experiment", str(plan), "--dir", str(exp)]
    first, second, third = (f"hazard-sim-w2-{c}-s1" for c in ("all", "no-claims", "no-dms"))
    with open(tmp_path / "first.log", "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            # The first run is finished and recorded, the second has started its hub.
            wait_for(lambda: first in state(exp) and (exp / "runs" / second / "run.toml").exists(),
                     400, "the second run to start")  # fmt: skip
            proc.send_signal(signal.SIGINT)  # Ctrl-C
            assert proc.wait(timeout=180) == 130
        finally:
            if proc.poll() is None:
                proc.kill()
    said = (tmp_path / "first.log").read_text()
    assert "stopped by SIGINT: 1 of 3 runs finished; resume with: swarm experiment" in said
    recorded = state(exp)
    assert list(recorded) == [first] and recorded[first]["status"] == "done"
    half = tomllib.loads((exp / "runs" / second / "run.toml").read_text())
    assert half["stopped_because"] == "stopped by SIGTERM"  # it stopped cleanly, not recorded
    first_toml = (exp / "runs" / first / "run.toml").read_text()

    resumed = subprocess.run([*command, "--parallel", "2"], capture_output=True, text=True,
                             timeout=600)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "3 runs, 1 already finished, 2 to run (2 at a time)" in resumed.stderr
    assert "experiment tiny: 3 of 3 runs finished" in resumed.stdout
    after = state(exp)
    assert after[first] == recorded[first]  # the finished run was not redone
    a, b = after[second], after[third]
    assert a["started"] < b["ended"] and b["started"] < a["ended"]  # type: ignore[operator]
    assert (exp / "runs" / first / "run.toml").read_text() == first_toml
    redone = tomllib.loads((exp / "runs" / second / "run.toml").read_text())
    assert redone["started"] > half["started"] and redone["stopped_because"] == (
        "every worker finished")  # fmt: skip
    provenance = redone["provenance"]
    assert provenance["seed"] == "1" and provenance["harness"] == "sim"
    assert re.fullmatch(r"[0-9a-f]{16}", provenance["prompt_sha256"])
    assert provenance["cpu_count"] >= 1 and provenance["python"]

    report = subprocess.run([SWARM, "report", str(exp)], capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert report.returncode == 0, report.stdout + report.stderr
    assert "warning" not in report.stderr
    md = (exp / "report.md").read_text()
    assert "## Against the baseline" in md and "## What each ablation costs" in md
    row = next(line for line in md.splitlines()
               if line.startswith("| hazard · sim · 2w · all on | 1 |"))  # fmt: skip
    assert "100.0 (n=1)" in row  # final pass rate: one repeat gives no interval
    assert (exp / "report.html").read_text().startswith("<!doctype html>")
    with open(exp / "runs.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["run"] for r in rows] == [first, second, third]
    assert [r["without"] for r in rows] == ["", "claims", "dms"]
    assert all(float(r["final_pass_rate"]) == 1.0 for r in rows)

    # A run made with another Python than its peers: the report says so.
    path = exp / "runs" / second / "run.toml"
    path.write_text(re.sub(r'^python = ".*"$', 'python = "3.99.0"', path.read_text(), flags=re.M))
    warned = subprocess.run([SWARM, "report", str(exp)], capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert warned.returncode == 0
    assert "warning: runs differ in python, which the plan did not vary" in warned.stderr
    assert "3.99.0 (1 runs); " in warned.stderr or "; 3.99.0 (1 runs)" in warned.stderr
    assert "differ in python" in (exp / "report.md").read_text()
