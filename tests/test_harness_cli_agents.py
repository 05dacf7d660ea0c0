"""The `claude-code` and `codex` harnesses, run against stand-in executables (tests/fakes)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from swarm.errors import InvalidInput
from swarm.harness import SessionContext, SessionLimits, get_harness

FAKE = Path(__file__).parent / "fakes" / "agent_cli.py"


def install(bin_dir: Path, name: str) -> Path:
    """Writes the stand-in as an executable called `name`, run by this interpreter."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\n{FAKE.read_text()}")
    path.chmod(0o755)
    return path


def context(tmp_path: Path, mode: str = "ok", **changes: Any) -> SessionContext:
    workdir = tmp_path / "checkout"
    workdir.mkdir(exist_ok=True)
    values: dict[str, Any] = {
        "worker": "w3",
        "number": 2,
        "workdir": workdir,
        "prompt": "You are w3. Claim, change, merge.",
        "env": {
            "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "SWARM_HUB_URL": "http://127.0.0.1:9",
            "SWARM_TOKEN": "swt_w3",
            "FAKE_RECORD": str(tmp_path / "calls.jsonl"),
            "FAKE_MODE": mode,
        },
        "limits": SessionLimits(max_steps=40, max_cost=2.5, max_seconds=30),
    }
    values.update(changes)
    return SessionContext(**values)


def calls(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "calls.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_claude_code_is_called_headless_with_limits_and_usage(tmp_path: Path) -> None:
    install(tmp_path / "bin", "claude")  # found on the session's PATH
    ctx = context(
        tmp_path,
        model="claude-sonnet-4-5",
        api_base="http://127.0.0.1:4000",
        channel_digest=lambda: "[msg 4 #tasks operator] focus on the parser",
    )
    harness = get_harness("claude-code", log_dir=tmp_path / "logs")
    result = harness.run_session(ctx)

    (call,) = calls(tmp_path)
    assert call["cwd"] == str(ctx.workdir)
    prompt = "Channel posts since your last session:\n[msg 4 #tasks operator] focus on the parser"
    assert call["argv"] == [
        "-p", "--output-format", "json", "--dangerously-skip-permissions",
        "--max-turns", "40", "--max-budget-usd", "2.5", "--model", "claude-sonnet-4-5",
        "--", f"{prompt}\n\n{ctx.prompt}",
    ]  # fmt: skip
    assert call["env"]["SWARM_HUB_URL"] == "http://127.0.0.1:9"
    assert call["env"]["SWARM_TOKEN"] == "swt_w3"
    assert call["env"]["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:4000"
    assert call["env"]["GIT_TERMINAL_PROMPT"] == "0"

    assert result.ended == "submitted"
    assert (result.steps, result.tokens_in, result.tokens_out) == (3, 200, 40)
    assert result.cost == pytest.approx(0.0123)
    assert result.detail == "claude-code exit status 0: merged PR #1"
    log = tmp_path / "logs" / "w3-session2.claude-code.stdout.log"
    assert '"total_cost_usd": 0.0123' in log.read_text()


def test_claude_code_exit_mapping(tmp_path: Path) -> None:
    install(tmp_path / "bin", "claude")
    harness = get_harness("claude-code")
    result = harness.run_session(context(tmp_path, "max_turns"))
    assert (result.ended, result.steps) == ("step_limit", 5)
    result = harness.run_session(context(tmp_path, "fail"))
    assert result.ended == "error"
    assert result.detail == "claude-code exit status 3: Invalid API key · Please run /login"
    assert (result.tokens_in, result.cost) == (0, 0.0)


def test_codex_from_the_env_var_with_steps_usage_and_price(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    codex = install(tmp_path / "elsewhere", "codex")  # not on PATH: named by SWARM_CODEX_BIN
    monkeypatch.setenv("SWARM_CODEX_BIN", str(codex))
    steps: list[str] = []
    ctx = context(
        tmp_path, model="gpt-5-codex", api_base="http://127.0.0.1:8000/v1", on_step=steps.append
    )
    harness = get_harness("codex", input_cost_per_token=1e-6, output_cost_per_token=4e-6)
    result = harness.run_session(ctx)

    (call,) = calls(tmp_path)
    assert call["argv"] == [
        "exec", "--json", "--sandbox", "danger-full-access", "--skip-git-repo-check",
        "--cd", str(ctx.workdir), "--model", "gpt-5-codex", "--", ctx.prompt,
    ]  # fmt: skip
    assert call["env"]["OPENAI_BASE_URL"] == "http://127.0.0.1:8000/v1"
    assert steps == ["bash -lc 'sw tail -n 0'", "bash -lc 'sw tail -n 1'", "edit notes.txt"]
    assert result.ended == "submitted"
    assert (result.steps, result.tokens_in, result.tokens_out) == (3, 200, 60)
    assert result.cost == pytest.approx(200 * 1e-6 + 60 * 4e-6)
    assert result.detail == "codex exit status 0: merged PR #2"


def test_codex_failures_and_step_limit(tmp_path: Path) -> None:
    install(tmp_path / "bin", "codex")
    harness = get_harness("codex")
    result = harness.run_session(context(tmp_path, "context"))
    assert result.ended == "context_limit" and "context window" in result.detail
    # codex has no turn flag: the harness counts its command events and stops it.
    result = harness.run_session(context(tmp_path, "steps", limits=SessionLimits(max_steps=4)))
    assert result.ended == "step_limit" and 4 <= result.steps < 10


def child_gone(tmp_path: Path) -> bool:
    pid = int((tmp_path / "calls.jsonl.child").read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:
            return True
        if "\nState:\tZ" in status:  # a zombie waiting for init to reap it is dead enough
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_wall_time_limit_kills_the_process_group(tmp_path: Path, name: str) -> None:
    install(tmp_path / "bin", "claude" if name == "claude-code" else "codex")
    harness = get_harness(name, grace_seconds=0.5)
    started = time.monotonic()
    result = harness.run_session(context(tmp_path, "hang", limits=SessionLimits(max_seconds=1)))
    assert result.ended == "time_limit" and "killed (time_limit)" in result.detail
    assert time.monotonic() - started < 5  # SIGTERM is ignored: SIGKILL followed the grace
    assert child_gone(tmp_path)


def test_stop_kills_the_session(tmp_path: Path) -> None:
    install(tmp_path / "bin", "claude")
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    result = get_harness("claude-code", grace_seconds=0.5).run_session(
        context(tmp_path, "hang", stop=stop)
    )
    assert result.ended == "stopped"
    assert child_gone(tmp_path)


def test_a_missing_executable_says_what_to_set(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="SWARM_CLAUDE_BIN"):
        get_harness("claude-code", executable="no-such-claude").run_session(context(tmp_path))


def test_a_cli_that_cannot_start_is_an_error(tmp_path: Path) -> None:
    install(tmp_path / "bin", "claude")
    harness = get_harness("claude-code")
    result = harness.run_session(context(tmp_path, workdir=tmp_path / "gone"))
    assert result.ended == "error" and result.detail.startswith("claude-code did not start")
