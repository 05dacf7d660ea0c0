"""Starting a box's commands from a small fork server instead of the worker process.

A bwrap command must join its box's cgroups, take its rlimits and enter the box's network
namespace between fork and exec. Done with `preexec_fn`, that is Python code in a child of the
worker process: Python then cannot use `vfork`, so every command copies the page tables of a
process that holds the hub client, the harness and, with many workers a process, all their
threads; under load that fork was most of what a command cost. The fork server
(`_forkserver_main.py`, the standard library only, one a worker process, about 10 MiB) is
small and single-threaded: it forks cheaply, does the same steps in its child, and execs. The
worker gets an ordinary `subprocess.Popen` whose pipes are its own; only the wait goes through
the server, which sends the command's wait status when the command ends.

    process = ForkServer.shared().popen(argv, setup, env=env, stdout=subprocess.PIPE)
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("swarm.sandbox")
MAIN = Path(__file__).with_name("_forkserver_main.py")
STATUS_SIZE = 4
LENGTH_SIZE = 4
KILLED = 9  # the wait status of a command whose server vanished: as if SIGKILLed


@dataclass(frozen=True)
class ChildSetup:
    """What a command's process does between fork and exec, as data (the fork server does it)."""

    cgroup_procs: tuple[str, ...] = ()  # each cgroup's `cgroup.procs`, to write "0" to
    rlimits: tuple[tuple[int, int], ...] = ()  # (resource.RLIMIT_*, soft = hard limit)
    namespaces: tuple[tuple[int, int], ...] = ()  # (an open namespace fd, its CLONE_NEW* kind)


class ForkServerError(OSError):
    """The fork server could not be started or stopped answering."""


class ForkServer:
    """One per worker process, started on first use; it ends when this process does."""

    _shared: ForkServer | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(MAIN), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C reaches the worker, which ends it
            )
        except OSError as exc:
            ours.close()
            raise ForkServerError(exc.errno, f"the fork server did not start: {exc}") from exc
        finally:
            theirs.close()
        self.control = ours
        self.owner = os.getpid()
        self.lock = threading.Lock()

    @classmethod
    def shared(cls) -> ForkServer:
        """This process's fork server (a new one after a fork: a child cannot share its
        parent's)."""
        with cls._shared_lock:
            server = cls._shared
            if server is None or server.owner != os.getpid() or server.process.poll() is not None:
                cls._shared = server = cls()
            return server

    def spawn(
        self,
        argv: Sequence[str | bytes | os.PathLike[str]],
        env: Mapping[str, str] | None,
        cwd: str | None,
        stdio: tuple[int, int, int],
        setup: ChildSetup,
    ) -> tuple[int, socket.socket]:
        """Start `argv`; answer its PID and the socket its wait status will arrive on."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        request = json.dumps(
            {
                "argv": [os.fsdecode(a) for a in argv],
                "env": dict(os.environ if env is None else env),
                "cwd": os.fsdecode(cwd) if cwd else None,
                "cgroups": list(setup.cgroup_procs),
                "rlimits": [list(pair) for pair in setup.rlimits],
                "namespaces": [kind for _fd, kind in setup.namespaces],
            }
        ).encode()
        fds = [theirs.fileno(), *stdio, *(fd for fd, _kind in setup.namespaces)]
        try:
            with self.lock:
                socket.send_fds(self.control, [b"S"], fds)
            theirs.close()
            ours.sendall(len(request).to_bytes(LENGTH_SIZE, "big") + request)
            head = _read_exactly(ours, 1 + LENGTH_SIZE)
            said = b""
            if head[:1] == b"E":
                said = _read_exactly(ours, int.from_bytes(head[1:], "big"))
        except OSError as exc:
            ours.close()
            raise ForkServerError(exc.errno, f"the fork server stopped answering: {exc}") from exc
        finally:
            theirs.close()
        if head[:1] == b"P":
            return int.from_bytes(head[1:], "big"), ours
        ours.close()
        name, _, rest = said.decode(errors="replace").partition(":")
        number, _, message = rest.partition(":")
        errno_value = int(number or "0", 16)
        if errno_value:
            raise OSError(errno_value, message, os.fsdecode(argv[0]))
        raise subprocess.SubprocessError(f"{name}: {message}")

    def popen(self, argv: Sequence[str], setup: ChildSetup, **kwargs: Any) -> subprocess.Popen[Any]:
        """`subprocess.Popen(argv, **kwargs)`, started by this server with `setup`."""
        return ServedPopen(self, setup, argv, **kwargs)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.control.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        part = conn.recv(size - len(data))
        if not part:
            raise ForkServerError(0, "the fork server stopped answering")
        data += part
    return data


def _std(fd: int, default: int) -> int:
    return default if fd == -1 else fd


class ServedPopen(subprocess.Popen[Any]):
    """A `subprocess.Popen` whose child the fork server starts and waits for.

    Its own process group (a session: `os.killpg(process.pid, …)` reaches all it started), its
    pipes, `communicate`, `poll`, `wait` and signals behave as Popen's. `preexec_fn`,
    `pass_fds` and the credential arguments are refused: the setup is `ChildSetup`'s.
    """

    def __init__(self, server: ForkServer, setup: ChildSetup, argv: Sequence[str], **kwargs: Any):
        for refused in ("preexec_fn", "pass_fds", "user", "group", "extra_groups", "umask"):
            if kwargs.get(refused):
                raise ValueError(f"a fork-server command takes no {refused}")
        self._server = server
        self._setup = setup
        self._status_socket: socket.socket | None = None
        self._status_buffer = b""
        self._status: int | None = None
        super().__init__(list(argv), **kwargs)

    def _execute_child(
        self,
        args: Any,
        executable: Any,
        preexec_fn: Any,
        close_fds: Any,
        pass_fds: Any,
        cwd: Any,
        env: Any,
        startupinfo: Any,
        creationflags: Any,
        shell: Any,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        *_rest: Any,
    ) -> None:
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        if shell:
            argv = ["/bin/sh", "-c", *argv]
        if executable:
            argv[0] = executable
        try:
            stdio = (_std(p2cread, 0), _std(c2pwrite, 1), _std(errwrite, 2))
            self.pid, self._status_socket = self._server.spawn(argv, env, cwd, stdio, self._setup)
            self._child_created = True
        finally:
            popen: Any = self  # Popen's own helpers, private to it
            popen._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        """(pid, wait status) once the server has sent it, else (0, 0) under WNOHANG."""
        if self._status is None:
            conn = self._status_socket
            if conn is None:  # never started
                return self.pid, KILLED
            conn.setblocking(not wait_flags & os.WNOHANG)
            try:
                while len(self._status_buffer) < STATUS_SIZE:
                    part = conn.recv(STATUS_SIZE - len(self._status_buffer))
                    if not part:  # the server is gone, and with it the command
                        self._status = KILLED
                        break
                    self._status_buffer += part
                else:
                    self._status = int.from_bytes(self._status_buffer, "big", signed=True)
            except BlockingIOError:
                return 0, 0
            except OSError:
                self._status = KILLED
            conn.close()
        return self.pid, self._status

    def _internal_poll(self, _deadstate: Any = None, *_args: Any, **_kwargs: Any) -> int | None:
        popen: Any = self  # Popen's own lock and helpers, private to it
        if self.returncode is None:
            if not popen._waitpid_lock.acquire(False):
                return None
            try:
                if self.returncode is None:
                    pid, status = self._try_wait(os.WNOHANG)
                    if pid == self.pid:
                        popen._handle_exitstatus(status)
            finally:
                popen._waitpid_lock.release()
        return self.returncode


__all__ = ["ChildSetup", "ForkServer", "ForkServerError", "ServedPopen"]
