"""The `claude-code` and `codex` harnesses: their CLIs run non-interactively in the checkout.

They have no per-step hook: direct messages reach them through `sw` answers (the hub adds them
to every answer) and the channel digest is put before the prompt at session start. The
process runs in its own process group, which is killed on the wall-time limit or `ctx.stop`.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from swarm.errors import InvalidInput
from swarm.harness import SessionContext, SessionEnding, SessionResult
from swarm.sandbox import kill_group, signal_group
from swarm.sandbox import popen as popen_in
from swarm.sandbox.env import PROVIDER_KEYS

CONTEXT_ERROR = re.compile(r"context.{0,20}(window|length|limit)|prompt is too long", re.I)


@dataclass
class Outcome:
    """What a session's output said; `ended` stays None when the exit status decides."""

    ended: SessionEnding | None = None
    steps: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float | None = None  # None: the CLI printed no cost
    final: str = ""  # the agent's last message, or the error it reported
    lines: list[str] = field(default_factory=list)


def _tail(text: str, limit: int = 1500) -> str:
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


class CliAgentHarness(abc.ABC):
    """Shared by the CLI harnesses: start the CLI, watch limits, map its exit onto an ending."""

    name = ""
    env_var = ""  # names the executable, e.g. SWARM_CLAUDE_BIN
    default_bin = ""
    base_url_var = ""  # the provider's base URL variable, e.g. ANTHROPIC_BASE_URL
    default_api = ""  # the model API the CLI calls when no base URL is set

    def __init__(
        self,
        *,
        executable: str | None = None,
        extra_args: Sequence[str] = (),
        grace_seconds: float = 5.0,
        input_cost_per_token: float = 0.0,
        output_cost_per_token: float = 0.0,
        log_dir: Path | str | None = None,
    ) -> None:
        self.executable = executable
        self.extra_args = list(extra_args)
        self.grace_seconds = grace_seconds
        self.price = (input_cost_per_token, output_cost_per_token)
        self.log_dir = Path(log_dir) if log_dir else None

    # --- what differs between the CLIs ---
    @abc.abstractmethod
    def argv(self, executable: str, ctx: SessionContext, prompt: str) -> list[str]:
        """The command line that runs one session non-interactively."""

    def extra_env(self, ctx: SessionContext) -> dict[str, str]:
        return {}

    def sandbox_paths(self, env: dict[str, str]) -> list[Path]:
        """The CLI itself, read-only inside the sandbox (it may live outside /usr)."""
        try:
            found = Path(self.resolve(env)).resolve()
        except InvalidInput:
            return []
        # An installed CLI (npm's) is a link into its package folder: bind the whole package.
        package = next((p for p in found.parents if p.name == "node_modules"), None)
        return [package.parent if package else found]

    def sandbox_reach(self, api_base: str | None) -> list[str]:
        """The model API's "host:port", the one place a CLI's box may reach besides the hub
        (where the sandbox limits the network: bwrap, docker)."""
        url = urlsplit(api_base or os.environ.get(self.base_url_var) or self.default_api)
        if not url.hostname:
            return []
        return [f"{url.hostname}:{url.port or (443 if url.scheme == 'https' else 80)}"]

    def read_line(self, line: str, outcome: Outcome, ctx: SessionContext) -> None:
        """Called for each line of standard output as it arrives (optional hook)."""
        return None

    def finish(self, outcome: Outcome) -> None:
        """Called once after the process ended, with every output line in `outcome.lines`."""
        return None

    # --- shared ---
    def resolve(self, env: dict[str, str]) -> str:
        wanted = self.executable or os.environ.get(self.env_var) or self.default_bin
        # Found on the worker's PATH, then run by its full path (bound into the sandbox).
        search = os.pathsep.join(p for p in (env.get("PATH"), os.environ.get("PATH")) if p)
        found = shutil.which(wanted, path=search)
        if not found:
            raise InvalidInput(
                f"the {self.name} harness cannot find {wanted!r}: install it, put it on PATH "
                f"or set {self.env_var} to its path"
            )
        return found

    def prompt(self, ctx: SessionContext) -> str:
        digest = ctx.channel_digest()
        if not digest:
            return ctx.prompt
        return f"Channel posts since your last session:\n{digest}\n\n{ctx.prompt}"

    def run_session(self, ctx: SessionContext) -> SessionResult:
        # The CLI calls its model itself, so its provider key and base URL (and nothing else of
        # this process's environment) join the sandbox's allow-listed environment.
        keys = {name: os.environ[name] for name in PROVIDER_KEYS if name in os.environ}
        box = ctx.sandbox()
        extra = {"GIT_TERMINAL_PROMPT": "0", **keys, **self.extra_env(ctx)}
        box.spec = replace(box.spec, env={**box.spec.env, **extra})
        argv = self.argv(self.resolve(ctx.env), ctx, self.prompt(ctx))
        outcome = Outcome()
        try:
            process = popen_in(
                box,
                argv,
                cwd=ctx.workdir,
                stdin=subprocess.DEVNULL,  # claude -p would otherwise wait for standard input
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
            )
        except OSError as error:  # not executable, checkout missing, ...
            return SessionResult(ended="error", detail=f"{self.name} did not start: {error}")
        assert process.stdout is not None and process.stderr is not None
        errors: list[str] = []
        readers = [
            threading.Thread(target=self._read, args=(process.stdout, outcome, ctx), daemon=True),
            threading.Thread(target=_collect, args=(process.stderr, errors), daemon=True),
        ]
        for reader in readers:
            reader.start()
        killed = self._watch(process, ctx, outcome)
        self._kill(process)  # also after a normal exit: what it left running must not outlive it
        for reader in readers:
            reader.join(timeout=self.grace_seconds)
        self.finish(outcome)
        stderr = "".join(errors)
        self._log(ctx, outcome, stderr)
        return self._result(process.returncode, killed, outcome, stderr)

    def _read(self, stream: IO[str], outcome: Outcome, ctx: SessionContext) -> None:
        for line in stream:
            outcome.lines.append(line)
            self.read_line(line, outcome, ctx)

    def _watch(
        self, process: subprocess.Popen[str], ctx: SessionContext, outcome: Outcome
    ) -> SessionEnding | None:
        """Waits for the process; kills its group on a limit or stop and says which."""
        limits = ctx.limits
        deadline = time.monotonic() + limits.max_seconds if limits.max_seconds > 0 else None
        while process.poll() is None:
            reason: SessionEnding | None = None
            if ctx.stop.is_set():
                reason = "stopped"
            elif deadline is not None and time.monotonic() >= deadline:
                reason = "time_limit"
            elif 0 < limits.max_steps <= outcome.steps:
                reason = "step_limit"
            if reason:
                return reason
            ctx.stop.wait(0.05)
        return None

    def _kill(self, process: subprocess.Popen[str]) -> None:
        """SIGTERM to the process group, then SIGKILL to whatever is left of it."""
        if process.poll() is None:
            signal_group(process, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=self.grace_seconds)
        kill_group(process)
        process.wait()

    def _result(
        self, code: int, killed: SessionEnding | None, outcome: Outcome, stderr: str
    ) -> SessionResult:
        if outcome.cost is None:
            outcome.cost = outcome.tokens_in * self.price[0] + outcome.tokens_out * self.price[1]
        if killed:
            ended: SessionEnding = killed
        elif outcome.ended:
            ended = outcome.ended
        else:
            ended = "submitted" if code == 0 else "error"
        if ended == "error" and CONTEXT_ERROR.search(outcome.final + stderr):
            ended = "context_limit"
        status = f"killed ({killed})" if killed else f"exit status {code}"
        said = outcome.final or (stderr if code else "")
        detail = f"{self.name} {status}" + (f": {_tail(said)}" if said.strip() else "")
        return SessionResult(
            ended=ended,
            steps=outcome.steps,
            tokens_in=outcome.tokens_in,
            tokens_out=outcome.tokens_out,
            cost=outcome.cost,
            detail=detail,
        )

    def _log(self, ctx: SessionContext, outcome: Outcome, stderr: str) -> None:
        if not self.log_dir:
            return
        self.log_dir.mkdir(parents=True, exist_ok=True)
        stem = f"{ctx.worker}-session{ctx.number}.{self.name}"
        (self.log_dir / f"{stem}.stdout.log").write_text("".join(outcome.lines))
        (self.log_dir / f"{stem}.stderr.log").write_text(stderr)


class ClaudeCodeHarness(CliAgentHarness):
    """`claude -p … --output-format json --dangerously-skip-permissions` in the checkout."""

    name = "claude-code"
    env_var = "SWARM_CLAUDE_BIN"
    default_bin = "claude"
    base_url_var = "ANTHROPIC_BASE_URL"
    default_api = "https://api.anthropic.com"

    def argv(self, executable: str, ctx: SessionContext, prompt: str) -> list[str]:
        argv = [executable, "-p", "--output-format", "json", "--dangerously-skip-permissions"]
        if ctx.limits.max_steps > 0:
            argv += ["--max-turns", str(ctx.limits.max_steps)]
        if ctx.limits.max_cost > 0:
            argv += ["--max-budget-usd", f"{ctx.limits.max_cost:g}"]
        if ctx.model:
            argv += ["--model", ctx.model]
        return [*argv, *self.extra_args, "--", prompt]  # `--`: a prompt may start with "-"

    def extra_env(self, ctx: SessionContext) -> dict[str, str]:
        return {"ANTHROPIC_BASE_URL": ctx.api_base} if ctx.api_base else {}

    def finish(self, outcome: Outcome) -> None:
        result = _last_json(outcome.lines)
        if not result:
            return
        usage = result.get("usage") or {}
        outcome.tokens_in = sum(
            int(usage.get(key) or 0)
            for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        outcome.tokens_out = int(usage.get("output_tokens") or 0)
        if result.get("total_cost_usd") is not None:
            outcome.cost = float(result["total_cost_usd"])
        outcome.steps = int(result.get("num_turns") or 0)
        outcome.final = str(result.get("result") or result.get("error") or "")
        subtype = str(result.get("subtype") or "")
        if "max_turns" in subtype:
            outcome.ended = "step_limit"
        elif "budget" in subtype:
            outcome.ended = "cost_limit"
        elif result.get("is_error") or subtype.startswith("error"):
            outcome.ended = "error"


class CodexHarness(CliAgentHarness):
    """`codex exec --json …` in the checkout; its JSONL events give steps and usage."""

    name = "codex"
    env_var = "SWARM_CODEX_BIN"
    default_bin = "codex"
    base_url_var = "OPENAI_BASE_URL"
    default_api = "https://api.openai.com"

    def argv(self, executable: str, ctx: SessionContext, prompt: str) -> list[str]:
        # The sandbox must allow network: `sw` and `git push` talk to the hub.
        argv = [
            executable,
            "exec",
            "--json",
            "--sandbox",
            "danger-full-access",
            "--skip-git-repo-check",
            "--cd",
            str(ctx.workdir),
        ]
        if ctx.model:
            argv += ["--model", ctx.model]
        return [*argv, *self.extra_args, "--", prompt]

    def extra_env(self, ctx: SessionContext) -> dict[str, str]:
        return {"OPENAI_BASE_URL": ctx.api_base} if ctx.api_base else {}

    def sandbox_reach(self, api_base: str | None) -> list[str]:
        """The model API's "host:port", the one place a CLI's box may reach besides the hub
        (where the sandbox limits the network: bwrap, docker)."""
        url = urlsplit(api_base or os.environ.get(self.base_url_var) or self.default_api)
        if not url.hostname:
            return []
        return [f"{url.hostname}:{url.port or (443 if url.scheme == 'https' else 80)}"]

    def read_line(self, line: str, outcome: Outcome, ctx: SessionContext) -> None:
        event = _json(line)
        kind = event.get("type")
        if kind == "item.completed":
            item = event.get("item") or {}
            if item.get("type") == "agent_message":
                outcome.final = str(item.get("text") or "")
            elif item.get("type") not in ("reasoning", "todo_list", None):
                outcome.steps += 1
                ctx.on_step(_describe_item(item))
        elif kind == "turn.completed":
            usage = event.get("usage") or {}
            outcome.tokens_in += int(usage.get("input_tokens") or 0)
            outcome.tokens_out += int(usage.get("output_tokens") or 0)
        elif kind in ("turn.failed", "error"):
            error = event.get("error") or event
            outcome.final = str(error.get("message") or error)
            outcome.ended = "error"


def _collect(stream: IO[str], into: list[str]) -> None:
    into.append(stream.read())


def _describe_item(item: dict[str, Any]) -> str:
    if item.get("type") == "command_execution":
        return " ".join(str(item.get("command") or "").split())[:160]
    if item.get("type") == "file_change":
        paths = [str(c.get("path")) for c in item.get("changes") or [] if isinstance(c, dict)]
        return "edit " + ", ".join(paths)[:150]
    return str(item.get("type"))


def _json(line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _last_json(lines: list[str]) -> dict[str, Any]:
    """The final JSON object the CLI printed (it may print other lines first)."""
    for line in reversed(lines):
        if value := _json(line):
            return value
    return _json("".join(lines))
