"""Sandboxes for agent sessions: backends by name behind one small port, imported lazily.

An agent is untrusted code. Every command an agent session runs (mini-swe-agent's commands, the
`claude-code` and `codex` CLIs, the simulated harness's git commands) and the hub's merge check
go through a `Box`: a sandbox holding one checkout (read-write), a private /tmp, the system
read-only and `sw` with the worker's own token, and nothing of the run (its database, the
workspace repository, peers' checkouts, the task's hidden tests, the operator and join tokens).

    sandbox = get_sandbox("bwrap")
    box = sandbox.open(BoxSpec(name="w1", checkout=path, env=agent_env(...)))
    done = run(box, ["git", "status"], timeout=60)
    box.close()
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol, cast

from swarm.errors import InvalidInput
from swarm.sandbox.forkserver import ChildSetup, ForkServer, ForkServerError

SANDBOXES: dict[str, str] = {
    "bwrap": "swarm.sandbox.bwrap:BwrapSandbox",
    "docker": "swarm.sandbox.docker:DockerSandbox",
    "none": "swarm.sandbox:NoSandbox",
}
NONE_WARNING = (
    "--sandbox none: agent sessions run unconfined, with this machine's files, processes and "
    "network in reach; use it only for agents you trust"
)


@dataclass(frozen=True)
class SandboxLimits:
    """What one sandbox may use, where its backend can enforce it (docs/security.md)."""

    memory_mb: int = 4096  # the sandbox's processes together (cgroup), else each one (rlimit)
    processes: int = 512  # tasks alive at once: a fork bomb stops here
    file_size_mb: int = 2048  # the largest file a command may write
    tmp_mb: int = 1024  # the private /tmp
    cpu_share: float = 1.0  # relative weight against other sandboxes (1.0: an equal share)
    command_seconds: float = 900.0  # the wall time of one command; the harness may ask for less
    disk_mb: int = 4096  # the checkout's size on disk; past it the box's commands are stopped

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SandboxLimits:
        """The defaults, with `SWARM_SANDBOX_<FIELD>` (e.g. SWARM_SANDBOX_MEMORY_MB) where set."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for item in fields(cls):
            raw = environ.get(f"SWARM_SANDBOX_{item.name.upper()}", "").strip()
            if not raw:
                continue
            kind = float if item.type in ("float", float) else int
            try:
                value = kind(raw)
            except ValueError:
                value = -1
            if value <= 0:
                raise InvalidInput(
                    f"SWARM_SANDBOX_{item.name.upper()}={raw!r} is not a positive number; "
                    f"unset it for the default ({getattr(cls, item.name)})"
                )
            values[item.name] = value
        return cls(**values)


@dataclass(frozen=True)
class BoxSpec:
    """What one sandbox holds: a worker's checkout and the environment its commands get."""

    name: str  # the worker, e.g. "w3"; names the sandbox (container, cgroup)
    checkout: Path  # read-write, at the same path inside
    env: Mapping[str, str]  # the whole environment of commands inside (see agent_env)
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    network: bool = True  # False: no network at all (scoring)
    extra_ro: tuple[Path, ...] = ()  # more read-only paths (a scoring's hidden tests)
    # "host:port"s the box may reach besides the hub (a CLI agent's model API), where the
    # backend limits the network (bwrap, docker); `none` does not look at it.
    reach: tuple[str, ...] = ()
    image: str | None = None  # the task's container image ([environment].image), for docker
    # Host paths masked inside (a rebuild task's original program, where the machine has it
    # installed): a file cannot be opened or run (/dev/null on a nodev mount), a folder is empty.
    hidden: tuple[Path, ...] = ()


@dataclass
class Launch:
    """How to start a command on the host so that it runs inside the box."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path | None
    preexec: Callable[[], None] | None = None
    # The same steps as data, for the fork server (swarm.sandbox.forkserver), which starts the
    # command from a small process instead of forking the worker's: `popen` uses it where set.
    setup: ChildSetup | None = None
    # Set by a backend whose commands are not host processes (a container's exec): `popen`
    # calls it with this launch and Popen's stream arguments, and it answers an object with
    # Popen's interface (pipes, communicate, poll, wait, send_signal) and `signal_group`.
    spawn: Callable[[Launch, dict[str, Any]], Any] | None = None


class Box(Protocol):
    """One open sandbox (for a session, a scoring, a merge check)."""

    spec: BoxSpec

    def launch(self, argv: Sequence[str], *, cwd: Path | None = None) -> Launch: ...

    def close(self) -> None: ...


class Sandbox(Protocol):
    name: str

    def open(self, spec: BoxSpec) -> Box: ...


class UnconfinedBox:
    """Commands run on the host as they are (`--sandbox none`), still with the allow-listed
    environment, so no secret of the worker process reaches them."""

    def __init__(self, spec: BoxSpec) -> None:
        self.spec = spec

    def launch(self, argv: Sequence[str], *, cwd: Path | None = None) -> Launch:
        return Launch(list(argv), dict(self.spec.env), cwd or self.spec.checkout)

    def close(self) -> None:
        return None


class NoSandbox:
    name = "none"

    def open(self, spec: BoxSpec) -> Box:
        return UnconfinedBox(spec)


def get_sandbox(name: str, **options: object) -> Sandbox:
    """The sandbox backend registered under `name` (its module is imported only now)."""
    try:
        target = SANDBOXES[name]
    except KeyError:
        raise InvalidInput(
            f"unknown sandbox {name!r}; choose one of {', '.join(sorted(SANDBOXES))}"
        ) from None
    module_name, _, attr = target.partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    sandbox: Sandbox = factory(**options)
    return sandbox


def default_sandbox() -> str:
    """`SWARM_SANDBOX`, else bwrap on Linux, else none (with the warning shown by the caller)."""
    wanted = os.environ.get("SWARM_SANDBOX", "").strip()
    if wanted:
        return wanted
    return "bwrap" if sys.platform.startswith("linux") else "none"


def bwrap_installed() -> bool:
    """Whether the bwrap backend's executable (SWARM_BWRAP_BIN, else `bwrap`) is on PATH."""
    return shutil.which(os.environ.get("SWARM_BWRAP_BIN") or "bwrap") is not None


def popen(
    box: Box, argv: Sequence[str], *, cwd: Path | None = None, **kwargs: object
) -> subprocess.Popen[Any]:
    """Start `argv` inside `box`, in a process group of its own (a kill takes its children)."""
    how = box.launch(argv, cwd=cwd)
    if how.spawn is not None:
        return cast("subprocess.Popen[Any]", how.spawn(how, dict(kwargs)))
    process: subprocess.Popen[Any] | None = None
    if how.setup is not None:
        server = _fork_server()
        if server is not None:
            process = server.popen(
                how.argv, how.setup, cwd=how.cwd, env=how.env, start_new_session=True, **kwargs
            )
    if process is None:
        process = subprocess.Popen(  # type: ignore[call-overload]
            how.argv,
            cwd=how.cwd,
            env=how.env,
            preexec_fn=how.preexec,
            start_new_session=True,
            **kwargs,
        )
    started = getattr(box, "started", None)
    if started is not None:  # the box stops its running commands when it must (disk quota)
        started(process)
    return process


def _fork_server() -> ForkServer | None:
    """This process's fork server; None (commands then fork the worker, with the same setup)
    where it cannot start or SWARM_SANDBOX_FORKSERVER=0."""
    if os.environ.get("SWARM_SANDBOX_FORKSERVER", "").strip() == "0":
        return None
    try:
        return ForkServer.shared()
    except ForkServerError as exc:
        if not _WARNED:
            _WARNED.append(True)
            logging.getLogger("swarm.sandbox").warning("%s; commands fork the worker instead", exc)
        return None


_WARNED: list[bool] = []


def run(
    box: Box,
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    timeout: float | None = None,
    input: str | None = None,
    merge_stderr: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run `argv` inside `box` to its end; on the time limit kill its whole group and raise
    `subprocess.TimeoutExpired` carrying what it printed."""
    limit = box.spec.limits.command_seconds
    timeout = min(timeout, limit) if timeout else limit
    process = popen(
        box,
        argv,
        cwd=cwd,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
    )
    try:
        out, err = process.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(process)
        out, err = process.communicate()
        raise subprocess.TimeoutExpired(list(argv), timeout, output=out, stderr=err) from None
    finally:
        kill_group(process)  # what a command left running in the background ends with it
    notice = getattr(box, "notice", "")
    if notice:  # the box stopped the command (its disk quota): the agent reads why
        box.notice = ""  # type: ignore[attr-defined]
        out = (out or "") + f"\n[sandbox] {notice}\n"
    return subprocess.CompletedProcess(list(argv), process.returncode, out, err or "")


def kill_group(process: subprocess.Popen[Any]) -> None:
    signal_group(process, signal.SIGKILL)


def signal_group(process: subprocess.Popen[Any], sig: int) -> None:
    """`sig` to a command started by `popen` and everything it started."""
    in_box = getattr(process, "signal_group", None)
    if in_box is not None:  # not a host process group (a container's exec)
        in_box(sig)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


__all__ = [
    "NONE_WARNING",
    "SANDBOXES",
    "Box",
    "BoxSpec",
    "Launch",
    "NoSandbox",
    "Sandbox",
    "SandboxLimits",
    "UnconfinedBox",
    "bwrap_installed",
    "default_sandbox",
    "get_sandbox",
    "kill_group",
    "popen",
    "run",
    "signal_group",
]
