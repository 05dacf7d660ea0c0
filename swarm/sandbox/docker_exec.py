"""A command running in a container through the Engine's exec API, with the part of
`subprocess.Popen`'s interface that harnesses use (pipes, `communicate`, `poll`, `wait`, signals).

The exec's output arrives multiplexed on one socket (8-byte frame headers: stream, size); a
thread splits it into real pipes, so `stdout` and `stderr` are ordinary files. Standard input
is a pipe too, carried to the socket, whose writing half is shut at its end (the command then
reads EOF). Signals go to the command's host PID (the Engine tells it); `signal_group` reaches
every process the agent runs in the container (`reap`), since a docker box has no process
group of its own on the host.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

HEADER = struct.Struct(">BxxxL")
STDOUT, STDERR = 1, 2


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _attach(api: Any, exec_id: str, tty: bool) -> tuple[socket.socket, bytes]:
    """The plain socket under what the SDK's `exec_start(socket=True)` answers, and what the
    HTTP reader had already read past the response's head (the output's first bytes)."""
    attached = api.exec_start(exec_id, socket=True, tty=tty)
    raw = getattr(attached, "_sock", attached)
    assert isinstance(raw, socket.socket)
    response = getattr(attached, "_response", None)
    buffered = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    early = b""
    if buffered is not None:
        raw.setblocking(False)
        try:
            early = buffered.read1(65536) or b""
        except (OSError, ValueError):
            early = b""
        finally:
            raw.setblocking(True)
    return raw, early


class ExecProcess:
    """Started at once; `returncode` is None while the command runs."""

    def __init__(
        self,
        api: Any,  # docker.APIClient
        container: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        user: str,
        reap: Callable[[int], None],
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        text: bool = False,
        encoding: str | None = None,
        errors: str | None = None,
        tty: bool = False,
        **_ignored: Any,  # start_new_session, preexec_fn: what a host process would need
    ) -> None:
        self.api = api
        self.args = list(argv)
        self.returncode: int | None = None
        self._reap = reap
        self._text = text or encoding is not None or errors is not None
        self._encoding = encoding or "utf-8"
        self._errors = errors or "strict"
        self._exec = api.exec_create(
            container, list(argv), stdin=stdin is not subprocess.DEVNULL, tty=tty,
            environment=dict(env), workdir=cwd, user=user,
        )["Id"]  # fmt: skip
        self._sock, self._early = _attach(api, self._exec, tty)
        self._tty = tty
        self.stdin: IO[Any] | None = None
        self.stdout: IO[Any] | None = None
        self.stderr: IO[Any] | None = None
        self._sinks: dict[int, int] = {}
        self._threads: list[threading.Thread] = []
        self._collected: dict[str, list[Any]] = {}
        self._collectors: list[threading.Thread] = []
        self._setup_output(stdout, stderr)
        self._setup_input(stdin)
        self._pid: int | None = None

    # -- the streams --------------------------------------------------------------------
    def _wrap(self, fd: int, mode: str) -> IO[Any]:
        binary = os.fdopen(fd, mode + "b", buffering=0 if "w" in mode else -1)
        if not self._text:
            return binary
        return io.TextIOWrapper(
            binary,
            encoding=self._encoding,
            errors=self._errors,
            write_through=True,
        )

    def _setup_output(self, stdout: Any, stderr: Any) -> None:
        for stream, wanted, inherit in ((STDOUT, stdout, 1), (STDERR, stderr, 2)):
            if wanted == subprocess.PIPE:
                read, write = os.pipe()
                self._sinks[stream] = write
                setattr(self, "stdout" if stream == STDOUT else "stderr", self._wrap(read, "r"))
            elif wanted == subprocess.STDOUT:
                continue  # filled in below, once stdout's sink is known
            elif wanted == subprocess.DEVNULL:
                self._sinks[stream] = os.open(os.devnull, os.O_WRONLY)
            else:
                self._sinks[stream] = os.dup(inherit if wanted is None else wanted.fileno())
        if stderr == subprocess.STDOUT:
            self._sinks[STDERR] = os.dup(self._sinks[STDOUT])
        self._spawn(self._demux, "exec-out")

    def _setup_input(self, stdin: Any) -> None:
        if stdin == subprocess.DEVNULL:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_WR)
            return
        if stdin == subprocess.PIPE:
            read, write = os.pipe()
            self.stdin = self._wrap(write, "w")
            source = read
        else:
            source = os.dup(0 if stdin is None else stdin.fileno())
        self._spawn(lambda: self._feed(source), "exec-in")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _feed(self, source: int) -> None:
        try:
            while data := os.read(source, 65536):
                self._sock.sendall(data)
        except OSError:
            pass
        finally:
            os.close(source)
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_WR)

    def _demux(self) -> None:
        buffer, chunk = b"", self._early
        try:
            while chunk or (chunk := self._sock.recv(65536)):
                if self._tty:  # a terminal has one stream, unframed
                    _write_all(self._sinks[STDOUT], chunk)
                    chunk = b""
                    continue
                buffer += chunk
                while len(buffer) >= HEADER.size:
                    stream, size = HEADER.unpack_from(buffer)
                    if len(buffer) < HEADER.size + size:
                        break
                    payload = buffer[HEADER.size : HEADER.size + size]
                    buffer = buffer[HEADER.size + size :]
                    with contextlib.suppress(BrokenPipeError):
                        _write_all(self._sinks.get(stream, self._sinks[STDOUT]), payload)
                chunk = b""
        except OSError:
            pass
        finally:
            for fd in set(self._sinks.values()):
                with contextlib.suppress(OSError):
                    os.close(fd)
            with contextlib.suppress(OSError):
                self._sock.close()

    # -- the process ----------------------------------------------------------------------
    @property
    def pid(self) -> int:
        """The command's PID on the host (asked of the Engine when first wanted; 0: unknown)."""
        if self._pid is None:
            for _ in range(200):
                info = self.api.exec_inspect(self._exec)
                if info.get("Pid") or not info.get("Running", True):
                    self._pid = int(info.get("Pid") or 0)
                    break
                time.sleep(0.005)
        return self._pid or 0

    def poll(self) -> int | None:
        if self.returncode is None:
            info = self.api.exec_inspect(self._exec)
            if not info.get("Running"):
                code = info.get("ExitCode")
                self.returncode = int(code) if code is not None else -1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.002
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(pause)
            pause = min(0.05, pause * 2)
        if self.stdout is None:  # written to a file of the caller's: all of it, first
            self._threads[0].join(1.0)
        return code

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        if not self._collectors:  # the first call starts readers that later calls keep
            if self.stdin is not None:
                data, self.stdin = input, self.stdin
                self._spawn(lambda: self._write_input(data), "exec-input")
            for name in ("stdout", "stderr"):
                stream = getattr(self, name)
                if stream is not None:
                    self._collected[name] = []
                    reader = threading.Thread(
                        target=self._collect, args=(stream, name), daemon=True
                    )
                    reader.start()
                    self._collectors.append(reader)
        deadline = None if timeout is None else time.monotonic() + timeout
        pause, asked = 0.002, time.monotonic()
        while any(reader.is_alive() for reader in self._collectors):
            # The output's end is the usual sign; the Engine is asked every 0.1 s only, for a
            # command that ended while what it left running holds its output open.
            if time.monotonic() - asked >= 0.1 and self.poll() is not None:
                # The command ended; what it left running holds its output open. As a bwrap
                # command's PID namespace ends with it, so does the rest of this box's work.
                self._reap(signal.SIGKILL)
                for reader in self._collectors:
                    reader.join(5.0)
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0, self._output("stdout"))
            if time.monotonic() - asked >= 0.1:
                asked = time.monotonic()
            for reader in self._collectors:
                reader.join(pause)
            pause = min(0.05, pause * 2)
        self.wait(None if deadline is None else max(0.01, deadline - time.monotonic()))
        return self._output("stdout"), self._output("stderr")

    def _write_input(self, data: Any) -> None:
        assert self.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            if data:
                self.stdin.write(data)
        with contextlib.suppress(OSError):
            self.stdin.close()

    def _collect(self, stream: IO[Any], name: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            while part := stream.read(65536):
                self._collected[name].append(part)

    def _output(self, name: str) -> Any:
        if name not in self._collected:
            return None
        parts = list(self._collected[name])
        return "".join(parts) if self._text else b"".join(parts)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None and self.pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def signal_group(self, sig: int) -> None:
        """`sig` to the command and everything the agent runs in its container."""
        self._reap(sig)

    def __enter__(self) -> ExecProcess:
        return self

    def __exit__(self, *_exc: object) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                with contextlib.suppress(OSError, ValueError):
                    stream.close()
        self.wait()


__all__ = ["ExecProcess"]
