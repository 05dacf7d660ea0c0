"""A new user's first hour, through the real CLI as a subprocess: failures stop the run fast and
say why on stdout, stopping is clean however it happens, and the panel says where to look."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarm.harness.scripted_server import ScriptedModelServer
from swarm.hub.server import free_port
from swarm.tasks.demo import make_demo_task


@pytest.fixture
def task(tmp_path: Path) -> Path:
    make_demo_task(tmp_path / "task")
    return tmp_path / "task"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    values = {**os.environ, "HOME": str(home), "COLUMNS": "100"}
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "SWARM_CLAUDE_BIN", "SWARM_CODEX_BIN"):
        values.pop(key, None)
    return values


def swarm(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarm", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )


# -- fail fast, on screen --------------------------------------------------------------------
def test_mini_without_an_api_key_stops_before_any_worker_with_the_fix(
    task: Path, env: dict[str, str], tmp_path: Path
) -> None:
    started = time.monotonic()
    done = swarm(
        "run", str(task), "--harness", "mini", "--model", "openai/gpt-4.1-mini",
        "--run-dir", str(tmp_path / "run"), "--budget", "1m", env=env, cwd=tmp_path,
    )  # fmt: skip
    assert time.monotonic() - started < 30
    assert done.returncode != 0
    assert "preflight failed" in done.stdout and "OPENAI_API_KEY" in done.stdout
    assert not (tmp_path / "run" / "hub.db").exists()  # nothing started


def test_a_missing_provider_key_fails_the_check_without_importing_litellm(
    env: dict[str, str], tmp_path: Path
) -> None:
    """The key's absence is known before any call: the check says so at once (litellm's import
    alone takes seconds), and names the variable."""
    probe = (
        "import sys; from swarm.worker.preflight import check_model; "
        "c = check_model('anthropic/claude-sonnet-4', None); "
        "print(c.ok, 'litellm' in sys.modules); print(c.detail)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    first, detail = done.stdout.splitlines()
    assert first == "False False"
    assert "ANTHROPIC_API_KEY is not set" in detail and "--api-base" in detail


def test_a_missing_agent_cli_stops_the_run_with_the_fix(
    task: Path, env: dict[str, str], tmp_path: Path
) -> None:
    started = time.monotonic()
    env["SWARM_CLAUDE_BIN"] = str(tmp_path / "no-such-claude")
    done = swarm("run", str(task), "--harness", "claude-code", env=env, cwd=tmp_path)
    assert time.monotonic() - started < 30
    assert done.returncode != 0
    assert "SWARM_CLAUDE_BIN" in done.stdout and "no-such-claude" in done.stdout


def test_sim_on_a_task_without_solution_units_stops_with_the_fix(
    task: Path, env: dict[str, str], tmp_path: Path
) -> None:
    toml = task / "task.toml"
    toml.write_text(
        "\n".join(line for line in toml.read_text().splitlines() if "solution" not in line)
    )
    started = time.monotonic()
    done = swarm("run", str(task), "--harness", "sim", env=env, cwd=tmp_path)
    assert time.monotonic() - started < 30
    assert done.returncode != 0
    assert "no solution units" in done.stdout


def test_an_unprepared_task_names_the_missing_part_and_the_fix(
    task: Path, env: dict[str, str], tmp_path: Path
) -> None:
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + 'prepare = "inflection"\n')
    shutil.rmtree(task / "hidden")
    done = swarm("doctor", str(task), env=env, cwd=tmp_path)
    assert done.returncode == 1
    assert f"FAIL  task: textkit: hidden does not exist; run `swarm task prepare {task}`" in (
        done.stdout
    )


def test_a_wrong_goal_path_in_a_prepared_task_is_not_called_unprepared(
    task: Path, env: dict[str, str], tmp_path: Path
) -> None:
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('goal = "goal.md"', 'goal = "gaol.md"'))
    toml.write_text(toml.read_text() + 'prepare = "inflection"\n')
    (task / ".prepared").write_text("")
    done = swarm("run", str(task), env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert "gaol.md does not exist, yet the task is prepared; check that path" in done.stderr
    assert "not prepared" not in done.stderr


def test_doctor_checks_the_model_with_one_call(
    task: Path, env: dict[str, str], tmp_path: Path
) -> None:
    with ScriptedModelServer() as model:
        done = swarm(
            "doctor", str(task), "--harness", "mini", "--model", "openai/scripted",
            "--api-base", model.url, env=env, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(model.requests) == 1
    assert "ok    model openai/scripted: answered" in done.stdout
    assert "everything a run needs is here" in done.stdout


@pytest.mark.slow
def test_sessions_that_all_fail_stop_the_run_non_zero_with_the_reason(
    task: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """The key works for the preflight's call, then the model refuses every session's."""
    refusal = (401, "invalid_api_key", "Incorrect API key provided: sk-revoked")
    with ScriptedModelServer(failures={n: refusal for n in range(2, 400)}) as model:
        started = time.monotonic()
        done = swarm(
            "run", str(task), "--harness", "mini", "--model", "openai/scripted",
            "--api-base", model.url, "--workers", "2", "--budget", "5m",
            "--run-dir", str(tmp_path / "run"), env=env, cwd=tmp_path, timeout=180,
        )  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert elapsed < 90
    assert "run failed (no session succeeded" in done.stdout
    assert "Incorrect API key provided" in done.stdout
    assert "failing" in done.stderr  # the panel showed which worker failed, and why
    assert re.search(r"sessions running \d+ of 2 · failed [1-9]", done.stderr)


# -- stopping is clean ------------------------------------------------------------------------
def _start_demo(tmp_path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "swarm", "demo", "--think", "3", "--run-dir", str(tmp_path / "run")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def _wait_for_sessions(run_dir: Path, timeout: float = 60) -> None:
    """Until the workers are at work (a session started), so a stop interrupts real work."""
    import sqlite3

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run_dir / "hub.db").exists():
            with sqlite3.connect(f"file:{run_dir / 'hub.db'}?mode=ro", uri=True) as conn:
                try:
                    if conn.execute("SELECT count(*) FROM sessions").fetchone()[0]:
                        return
                except sqlite3.OperationalError:
                    pass
        time.sleep(0.2)
    raise AssertionError("no session started")


def _assert_clean_summary(output: str, reason: str) -> None:
    assert "Traceback" not in output, output[-3000:]
    assert f"run finished ({reason})" in output, output[-3000:]
    assert "hidden tests on main: " in output
    assert "inspect: swarm hub --run-dir" in output


def test_sigterm_ends_with_the_summary_and_no_traceback(
    tmp_path: Path, env: dict[str, str]
) -> None:
    process = _start_demo(tmp_path, env)
    _wait_for_sessions(tmp_path / "run")
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=90)
    assert process.returncode == 0, stderr[-3000:]
    _assert_clean_summary(stdout + stderr, "stopped by SIGTERM")


def test_swarm_stop_ends_the_run_with_the_same_summary(tmp_path: Path, env: dict[str, str]) -> None:
    process = _start_demo(tmp_path, env)
    _wait_for_sessions(tmp_path / "run")
    asked = swarm("stop", str(tmp_path / "run"), env=env, cwd=tmp_path)
    assert asked.returncode == 0, asked.stderr
    stdout, stderr = process.communicate(timeout=90)
    assert process.returncode == 0, stderr[-3000:]
    _assert_clean_summary(stdout + stderr, "stopped by `swarm stop`")
    again = swarm("stop", str(tmp_path / "run"), env=env, cwd=tmp_path)
    assert again.returncode == 2 and "already ended (stopped by `swarm stop`)" in again.stderr


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _read_pty(fd: int, until: re.Pattern[str], timeout: float) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 65536).decode("utf-8", errors="replace")
            except OSError:  # the child closed the terminal
                chunk = ""
            seen += ANSI.sub("", chunk)
            if until.search(seen):
                return seen
            if not chunk:
                break
    raise AssertionError(f"no {until.pattern!r} on the terminal; saw:\n{seen[-3000:]}")


@pytest.fixture
def terminal(tmp_path: Path, env: dict[str, str]) -> Iterator[tuple[int, int]]:
    """`swarm demo` on a real pseudo-terminal, as a person runs it."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: become swarm
        os.chdir(tmp_path)
        argv = [sys.executable, "-m", "swarm", "demo", "--think", "5", "--run-dir", "run"]
        os.execve(sys.executable, argv, {**env, "TERM": "xterm"})
    try:
        yield pid, fd
    finally:
        with contextlib.suppress(ChildProcessError):  # the test reaped it
            if os.waitpid(pid, os.WNOHANG) == (0, 0):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        os.close(fd)


def test_ctrl_c_on_a_terminal_ends_with_the_summary_and_no_traceback(
    tmp_path: Path, terminal: tuple[int, int]
) -> None:
    pid, fd = terminal
    screen = _read_pty(fd, re.compile(r"dashboard\s+http://127\.0\.0\.1:\d+/dashboard"), 60)
    # Reading the screen until the workers are at work also keeps the terminal drained.
    screen += _read_pty(fd, re.compile(r"sessions running [1-9]"), 60)
    os.write(fd, b"\x03")  # Ctrl-C: the terminal sends SIGINT to the foreground group
    screen += _read_pty(fd, re.compile(r"git -C \S+ log --oneline main"), 90)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    _assert_clean_summary(screen, "stopped by SIGINT")


def test_the_budget_is_a_hard_limit(task: Path, env: dict[str, str], tmp_path: Path) -> None:
    """Units take 60 s each; the run still ends within seconds of its 4 s budget."""
    started = time.monotonic()
    done = swarm(
        "run", str(task), "--think", "60", "--budget", "4s", "--run-dir", str(tmp_path / "run"),
        env=env, cwd=tmp_path,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    assert "run finished (budget reached)" in done.stdout
    assert elapsed < 4 + 25, elapsed


# -- where to look ----------------------------------------------------------------------------
def test_run_on_a_chosen_port_shows_the_dashboard_url_first_and_pipes_whole_lines(
    task: Path, env: dict[str, str], tmp_path: Path
) -> None:
    port = free_port("127.0.0.1")
    run_dir = tmp_path / ("a-rather-long-folder-name-" * 4) / "run"
    done = swarm(
        "run", str(task), "--think", "0.1", "--port", str(port), "--run-dir", str(run_dir),
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert lines[1].rstrip() == f"dashboard      http://127.0.0.1:{port}/dashboard"
    assert f'hub_url = "http://127.0.0.1:{port}"' in (run_dir / "run.toml").read_text()
    # Piped, nothing wraps at 80 columns: the suggested commands stay whole.
    assert f"           git -C {run_dir}/workspace.git log --oneline main\n" in done.stdout


# -- smaller items ------------------------------------------------------------------------------
def test_importing_the_cli_loads_no_server_model_or_plotting_library() -> None:
    heavy = ("fastapi", "litellm", "matplotlib", "uvicorn", "sqlalchemy", "minisweagent")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys, swarm.cli; print([m for m in {heavy!r} if m in sys.modules])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]"


def test_help_lists_every_command_without_importing_them(
    env: dict[str, str], tmp_path: Path
) -> None:
    done = swarm("--help", env=env, cwd=tmp_path)
    assert done.returncode == 0
    for name in ("demo", "doctor", "eval", "export", "hub", "report", "run", "stop", "task"):
        assert re.search(rf"^  {name}\s", done.stdout, re.MULTILINE), name


def test_bad_durations_and_costs_are_named_as_what_they_are(
    task: Path, env: dict[str, str], tmp_path: Path
) -> None:
    banana = swarm("run", str(task), "--eval-every", "banana", env=env, cwd=tmp_path)
    assert banana.returncode == 2
    assert "Invalid value for '--eval-every': 'banana' is not a duration" in banana.stderr
    assert "budget" not in banana.stderr
    negative = swarm("run", str(task), "--max-cost", "-1", env=env, cwd=tmp_path)
    assert negative.returncode == 2 and "--max-cost" in negative.stderr
    assert not list(tmp_path.glob("runs/*"))


def test_hub_refuses_a_run_directory_that_does_not_exist(
    env: dict[str, str], tmp_path: Path
) -> None:
    done = swarm("hub", "--run-dir", str(tmp_path / "runs" / "typo"), env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert "no run directory at" in done.stderr and "--new" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_stop_of_something_that_is_not_a_run_says_so(env: dict[str, str], tmp_path: Path) -> None:
    done = swarm("stop", str(tmp_path), env=env, cwd=tmp_path)
    assert done.returncode == 2 and "is not a run directory (no run.toml)" in done.stderr


def test_eval_scores_a_repository_given_by_a_relative_path(
    task: Path, env: dict[str, str], tmp_path: Path
) -> None:
    from swarm.workspace.repo import init_repo

    init_repo(tmp_path / "runs" / "r" / "workspace.git", task / "start")
    done = swarm(
        "eval", str(task), "--repo", "runs/r/workspace.git", env=env, cwd=tmp_path, timeout=180
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"^[0-9a-f]{12}  0/49 passed \(0\.0%\)", done.stdout, re.MULTILINE)
