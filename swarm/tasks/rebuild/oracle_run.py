"""Run the oracle for one request, in a sandbox of its own (the hub calls this).

With bubblewrap (the default) the program sees the system read-only, a private /tmp, an
empty /dev, a read-only working folder holding the files the request sent, and its own files
read-only under a random folder (`/o-<16 hex>`) named nowhere it can look: not in its
environment, not in its argv (it starts through its ELF interpreter with `--argv0`), and there
is no /proc to find it from. No network, no run directory, no swarm; new user, PID, IPC and
network namespaces; rlimits and a cgroup where the hub may make one; a wall-time limit and a
cap on each output stream (past it the program is stopped). `none` runs the program unconfined
on the hub's machine: only for trusted set-ups without bubblewrap.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from swarm.errors import InvalidInput, Unavailable
from swarm.sandbox import SandboxLimits
from swarm.sandbox.limits import CgroupSet, preexec
from swarm.tasks.rebuild.oracle import OracleProgram

SANDBOXES = ("bwrap", "none")
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
ETC = (
    *("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "passwd", "group"),
    *("nsswitch.conf", "alternatives", "mime.types"),
)
SANDBOX_UID = 1000
# Printed on stderr inside the sandbox just before the program starts: without it, bubblewrap
# itself failed (no user namespaces in a container without its seccomp profile, …), and the
# error is the hub's to report, not the program's output.
STARTED = b"\x1eswarm-oracle-started\n"
_MARK = ["/bin/sh", "-c", 'printf "\\036swarm-oracle-started\\n" >&2; exec "$@"', "sh"]


@dataclass(frozen=True)
class OracleLimits:
    seconds: float = 10.0
    max_output_bytes: int = 1024 * 1024  # each of stdout and stderr
    memory_mb: int = 1024
    processes: int = 64
    file_size_mb: int = 16
    tmp_mb: int = 64


@dataclass(frozen=True)
class OracleRequest:
    args: tuple[str, ...]
    stdin: bytes = b""
    files: Mapping[str, bytes] = field(default_factory=dict)  # name -> content, in its cwd
    timeout: float | None = None  # at most the limit's


@dataclass(frozen=True)
class OracleResult:
    exit_code: int | None  # None: stopped by a limit; negative: killed by that signal
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    truncated: bool = False  # an output passed its cap, so the program was stopped
    seconds: float = 0.0


def _system_binds() -> list[str]:
    argv = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    for name in ETC:
        path = Path("/etc") / name
        if path.exists():
            argv += ["--ro-bind", str(path), str(path)]
    return argv


def command_line(program: OracleProgram, mount: Path, args: tuple[str, ...]) -> list[str]:
    """The argv that starts the oracle whose folder is at `mount`."""
    if program.interpreter and program.executable:
        libraries = ":".join(str(mount / p) for p in program.library_path)
        return [
            program.interpreter, "--library-path", libraries, "--argv0", program.program,
            str(mount / program.executable), *args,
        ]  # fmt: skip
    return [str(mount / program.command), *args]


def bwrap_argv(
    executable: str, program: OracleProgram, work: Path, limits: OracleLimits
) -> tuple[list[str], Path]:
    """bwrap's options for one run, and where the oracle's folder appears inside."""
    mount = Path(f"/o-{secrets.token_hex(8)}")
    argv = [
        executable,
        "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
        "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
        "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        *_system_binds(),
        "--dev", "/dev",
        "--size", str(limits.tmp_mb * 1024 * 1024), "--tmpfs", "/tmp",
        "--ro-bind", str(work), "/work",
        "--ro-bind", str(program.root), str(mount),
        "--chdir", "/work",
        "--",
    ]  # fmt: skip
    return argv, mount


def _drain(stream: IO[bytes], cap: int, sink: bytearray, full: threading.Event) -> None:
    """Read `stream` to its end, keeping at most `cap` bytes; set `full` past it (and stop
    reading: the program then waits on its pipe until it is stopped)."""
    while chunk := stream.read(65536):
        room = cap - len(sink)
        sink += chunk[: max(0, room)]
        if len(chunk) > room:
            full.set()
            return


def _write_files(work: Path, files: Mapping[str, bytes]) -> None:
    for name, content in files.items():
        target = (work / name).resolve()
        if not target.is_relative_to(work.resolve()) or target == work.resolve():
            raise InvalidInput(f"file name {name!r} leaves the oracle's working folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


def run_oracle(
    program: OracleProgram,
    request: OracleRequest,
    limits: OracleLimits = OracleLimits(),
    *,
    sandbox: str = "bwrap",
) -> OracleResult:
    """Run the oracle on `request` and return what it printed; never its own bytes."""
    if sandbox not in SANDBOXES:
        raise InvalidInput(f"unknown oracle sandbox {sandbox!r}; choose {' or '.join(SANDBOXES)}")
    seconds = min(request.timeout or limits.seconds, limits.seconds)
    with tempfile.TemporaryDirectory(prefix="swarm-oracle-") as scratch:
        work, stdin_file = Path(scratch) / "work", Path(scratch) / "stdin"
        work.mkdir()
        _write_files(work, request.files)
        stdin_file.write_bytes(request.stdin)
        if sandbox == "bwrap":
            found = shutil.which(os.environ.get("SWARM_BWRAP_BIN") or "bwrap")
            if not found:
                raise Unavailable(
                    "the hub cannot sandbox the oracle: install bubblewrap (apt-get install "
                    "bubblewrap), or set SWARM_ORACLE_SANDBOX=none where the oracle is trusted"
                )
            prefix, mount = bwrap_argv(found, program, work, limits)
            argv, cwd = [*prefix, *_MARK, *command_line(program, mount, request.args)], None
        else:
            argv, cwd = command_line(program, program.root, request.args), work
        box_limits = SandboxLimits(
            memory_mb=limits.memory_mb, processes=limits.processes,
            file_size_mb=limits.file_size_mb, tmp_mb=limits.tmp_mb,
        )  # fmt: skip
        cgroups = CgroupSet(f"oracle-{secrets.token_hex(3)}", box_limits)
        try:
            result = _run(argv, cwd, stdin_file, seconds, limits, box_limits, cgroups)
        finally:
            cgroups.close()
    if sandbox != "bwrap":
        return result
    if result.stderr.startswith(STARTED):
        return replace(result, stderr=result.stderr[len(STARTED) :])
    raise Unavailable(
        "the hub cannot sandbox the oracle: "
        f"{result.stderr.decode('utf-8', 'replace').strip()[:300] or 'bwrap failed'}; in a "
        "container the hub needs bubblewrap's seccomp profile (infra/seccomp-bwrap.json, see "
        "docs/deployment.md), or set SWARM_ORACLE_SANDBOX=none where the oracle is trusted"
    )


def _run(
    argv: list[str],
    cwd: Path | None,
    stdin_file: Path,
    seconds: float,
    limits: OracleLimits,
    box_limits: SandboxLimits,
    cgroups: CgroupSet,
) -> OracleResult:
    out, err, full = bytearray(), bytearray(), threading.Event()
    started = time.monotonic()
    with stdin_file.open("rb") as stdin:
        try:
            process = subprocess.Popen(
                argv, cwd=cwd, env=dict(ENV), stdin=stdin, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True,
                preexec_fn=preexec(box_limits, cgroups),
            )  # fmt: skip
        except OSError as exc:
            raise Unavailable(f"the oracle could not start: {exc.strerror or exc}") from None
    assert process.stdout is not None and process.stderr is not None
    readers = [
        threading.Thread(
            target=_drain, args=(stream, limits.max_output_bytes, sink, full), daemon=True
        )
        for stream, sink in ((process.stdout, out), (process.stderr, err))
    ]
    for reader in readers:
        reader.start()
    deadline = started + seconds
    timed_out = False
    while process.poll() is None:
        if full.is_set():
            break
        if time.monotonic() >= deadline:
            timed_out = True
            break
        full.wait(min(0.05, max(0.0, deadline - time.monotonic())))
    # Cut output means no meaningful status either: the program counts as stopped.
    stopped = process.poll() is None or full.is_set()
    # Whatever it started ends with it (and its PID namespace, under bwrap).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    for reader in readers:
        reader.join(timeout=5)  # a descendant that left the group may hold a pipe open
    for pipe in (process.stdout, process.stderr):
        pipe.close()
    return OracleResult(
        exit_code=None if stopped else process.returncode,
        stdout=bytes(out),
        stderr=bytes(err),
        timed_out=timed_out,
        truncated=full.is_set(),
        seconds=round(time.monotonic() - started, 3),
    )
