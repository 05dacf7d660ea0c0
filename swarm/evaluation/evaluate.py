"""Score one commit of the shared repository with the hidden tests, in a checkout of our own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from swarm.errors import NotFound, Unavailable
from swarm.evaluation.parse import parse_counts
from swarm.tasks.model import Task

TAIL_CHARS = 4000


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

    @property
    def rate(self) -> float:
        """Fraction of hidden tests passing (0 when nothing was counted)."""
        return self.passed / self.total if self.total else 0.0

    def restamped(self, when: float) -> Checkpoint:
        """The same score, recorded again at `when` (the commit did not move)."""
        return replace(self, time=when, duration=0.0)


def _git(args: list[str], cwd: Path) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=_git_env()
    )
    if result.returncode != 0:
        raise Unavailable(f"git {args[0]} failed in {cwd}: {result.stderr.strip()[-300:]}")
    return result.stdout.strip()


def _git_env() -> dict[str, str]:
    # Never prompt for credentials: an evaluator runs unattended.
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    env.pop("GIT_DIR", None)
    return env


def sync_checkout(repo: str | Path, commit: str, workdir: Path) -> tuple[Path, str]:
    """Fetch `repo` into `workdir/checkout` and check out `commit` cleanly; returns (dir, sha)."""
    checkout = workdir / "checkout"
    if not (checkout / ".git").exists():
        checkout.mkdir(parents=True, exist_ok=True)
        _git(["init", "--quiet"], checkout)
        _git(["remote", "add", "origin", str(repo)], checkout)
    else:
        _git(["remote", "set-url", "origin", str(repo)], checkout)
    _git(["fetch", "--quiet", "--force", "origin", "+refs/heads/*:refs/remotes/origin/*"], checkout)
    sha = ""
    for candidate in (f"refs/remotes/origin/{commit}", commit):
        result = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}"],
            cwd=checkout, capture_output=True, text=True, env=_git_env(),
        )  # fmt: skip
        if result.returncode == 0:
            sha = result.stdout.strip()
            break
    if not sha:
        raise NotFound(f"commit or branch {commit!r} is not in {repo}")
    _git(["checkout", "--quiet", "--force", "--detach", sha], checkout)
    _git(["clean", "--quiet", "-xdff"], checkout)
    return checkout, sha


def clean_env(home: Path) -> dict[str, str]:
    """A minimal environment: nothing from the evaluator's shell leaks into the hidden tests."""
    python_bin = str(Path(sys.executable).parent)
    return {
        "PATH": os.pathsep.join([python_bin, "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "TMPDIR": str(home),
    }


def run_limited(
    command: str, cwd: Path, env: dict[str, str], timeout: float
) -> tuple[int | None, str]:
    """Run a shell command; on timeout kill its whole process group and return (None, output)."""
    with tempfile.TemporaryFile() as sink:
        process = subprocess.Popen(
            command, shell=True, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            code: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            # Tests may leave children behind (servers, forks): end the whole group either way.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        sink.seek(0)
        return code, sink.read().decode("utf-8", errors="replace")


def evaluate(
    task: Task, repo: str | Path, commit: str = "main", workdir: str | Path | None = None
) -> Checkpoint:
    """Check out `commit` of `repo` in `workdir` (the evaluator's own) and run the hidden tests."""
    task.require_prepared()
    base = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="swarm-eval-"))
    base.mkdir(parents=True, exist_ok=True)
    checkout, sha = sync_checkout(repo, commit, base)
    home = base / "home"
    home.mkdir(exist_ok=True)
    started = time.time()
    code, output = run_limited(
        task.render_eval_command(), checkout, clean_env(home), task.eval_timeout
    )
    duration = time.time() - started
    tail = output[-TAIL_CHARS:]
    if code is None:
        reason = f"timed out after {task.eval_timeout:g}s; the process group was killed"
        return Checkpoint(started, sha, 0, 0, duration, tail, reason)
    counts = parse_counts(output)
    if counts is None:
        reason = f"no test summary in the output (exit code {code}); the run crashed"
        return Checkpoint(started, sha, 0, 0, duration, tail, reason)
    return Checkpoint(started, sha, counts[0], counts[1], duration, tail)
