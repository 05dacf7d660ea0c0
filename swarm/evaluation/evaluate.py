"""Score one commit of the shared repository with the hidden tests: a fresh copy of the commit
and of the hidden tests (with canaries) for each scoring, in a fresh sandbox with no network,
with pytest configured by the evaluator alone (docs/tasks.md, "The evaluator")."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from swarm.evaluation.canary import plant
from swarm.evaluation.isolation import pytest_settings, read_results_file
from swarm.evaluation.parse import TestOutcome, parse_tests
from swarm.evaluation.source import Source, open_source
from swarm.evaluation.verdict import judge
from swarm.sandbox import BoxSpec, SandboxLimits, default_sandbox, get_sandbox, run
from swarm.tasks.environment import PythonEnv
from swarm.tasks.model import Task
from swarm.tasks.rebuild.oracle import task_oracle

TAIL_CHARS = 4000

# "scored": a real pass rate. "tampered": a canary test (one that must fail) passed, so the code
# under test interfered with the scoring. "incomplete": fewer tests ran than the task declares.
# "error": nothing could be scored (timeout, crash). Only "scored" checkpoints are pass rates.
CheckpointStatus = Literal["scored", "tampered", "incomplete", "error"]


@dataclass(frozen=True)
class Checkpoint:
    """One score of a commit at one moment; `reason` says why it is not a real score."""

    time: float
    commit: str
    passed: int
    total: int
    duration: float
    output_tail: str
    reason: str | None = None
    status: CheckpointStatus = "scored"
    # Each hidden test's outcome by its id (pytest's node id), when the scoring reports them.
    tests: dict[str, TestOutcome] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Fraction of hidden tests passing (0 when nothing was counted)."""
        return self.passed / self.total if self.total else 0.0

    def to_hub(self) -> dict[str, Any]:
        """The body of `POST /v1/checkpoints` (everything but the output's tail)."""
        return {
            "time": self.time,
            "commit": self.commit,
            "passed": self.passed,
            "total": self.total,
            "duration": self.duration,
            "reason": self.reason,
            "status": self.status,
            "tests": self.tests,
        }

    def restamped(self, when: float) -> Checkpoint:
        """The same score, recorded again at `when` (the commit did not move)."""
        return replace(self, time=when, duration=0.0)


def clean_env(home: Path, python_bin: Path | None = None) -> dict[str, str]:
    """A minimal environment: nothing from the evaluator's shell leaks into the hidden tests.
    `python_bin`: the task environment's bin folder (default: this Python's)."""
    python_bin = python_bin or Path(sys.executable).parent
    return {
        "PATH": os.pathsep.join([str(python_bin), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "TMPDIR": str(home),
        "PYTHONPATH": "",  # bwrap would put swarm's own source tree there
    }


def evaluate(
    task: Task,
    repo: str | Path,
    commit: str = "main",
    workdir: str | Path | None = None,
    *,
    sandbox: str | None = None,
    python_env: PythonEnv | None = None,
) -> Checkpoint:
    """Score `commit` of `repo` (a git repository, path or URL, or a plain folder): a fresh
    copy of it and of the hidden tests, with canaries, in a fresh sandbox with no network.
    `sandbox`: a backend by name (default: `default_sandbox()`); `python_env`: the task's
    environment (`swarm.tasks.environment.task_environment`), None for this Python."""
    task.require_prepared()
    base = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="swarm-eval-"))
    base = base.resolve()
    base.mkdir(parents=True, exist_ok=True)
    source = open_source(repo, base)
    sha = source.resolve(commit)
    return score(task, source, sha, base, sandbox=sandbox, python_env=python_env)


def score(
    task: Task,
    source: Source,
    sha: str,
    base: Path,
    *,
    sandbox: str | None = None,
    python_env: PythonEnv | None = None,
) -> Checkpoint:
    """Score `sha` of `source` in a scoring folder of its own under `base`, removed after."""
    scoring = Path(tempfile.mkdtemp(prefix="scoring-", dir=base))
    try:
        return _score(task, source, sha, scoring, sandbox or default_sandbox(), python_env)
    finally:
        shutil.rmtree(scoring, ignore_errors=True)


def _score(
    task: Task, source: Source, sha: str, scoring: Path, sandbox: str, env: PythonEnv | None
) -> Checkpoint:
    # Only `work` is writable inside the sandbox: the copy of the code, a home and tmp, and
    # the pytest plugin's results. The hidden tests (with this scoring's canaries) and the
    # evaluator's pytest configuration are read-only.
    work, hidden, conf = scoring / "work", scoring / "hidden", scoring / "conf"
    checkout, home = work / "repo", work / "tmp"
    source.copy_into(sha, checkout)
    home.mkdir(parents=True)
    shutil.copytree(task.hidden_dir, hidden, symlinks=True)
    command = task.render_eval_command(hidden=hidden)
    canaries = plant(hidden, command, pytest=task.uses_pytest)
    environ = clean_env(home, env.bin_dir if env else None)
    read_only = [hidden, *(env.ro_paths() if env else ())]
    if task.oracle_path is not None and "{oracle}" in task.eval_command:
        read_only.append(task.oracle_path.parent)
    results = work / f"results-{secrets.token_hex(6)}.jsonl"
    if task.uses_pytest:
        environ.update(pytest_settings(hidden, conf, results))
        read_only.append(conf)
    program = task_oracle(task)
    spec = BoxSpec(
        name="eval",
        checkout=work,
        env=environ,
        limits=SandboxLimits(command_seconds=task.eval_timeout),
        network=False,
        extra_ro=tuple(read_only),
        # A rebuild task's original program, where this machine has it installed: the code
        # under test must not be able to call it.
        hidden=tuple(Path(p) for p in program.installed) if program else (),
    )
    box = get_sandbox(sandbox).open(spec)
    started = time.time()
    code: int | None
    try:
        done = run(box, ["sh", "-c", command], cwd=checkout, timeout=task.eval_timeout,
                   merge_stderr=True)  # fmt: skip
        code, output = done.returncode, done.stdout
    except subprocess.TimeoutExpired as exc:
        code, output = None, _text(exc.output)
    finally:
        box.close()
    duration = time.time() - started
    tail = output[-TAIL_CHARS:]
    if code is None:
        reason = f"timed out after {task.eval_timeout:g}s; the process group was killed"
        return Checkpoint(started, sha, 0, 0, duration, tail, reason, status="error")
    outcomes = read_results_file(results) if task.uses_pytest else parse_tests(output)
    verdict = judge(output, outcomes, canaries, task.check, per_test=task.uses_pytest)
    if verdict is None:
        reason = f"no test summary in the output (exit code {code}); the run crashed"
        return Checkpoint(started, sha, 0, 0, duration, tail, reason, status="error")
    return Checkpoint(
        started, sha, verdict.passed, verdict.total, duration, tail, verdict.reason,
        verdict.status, verdict.tests,
    )  # fmt: skip


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value or ""
