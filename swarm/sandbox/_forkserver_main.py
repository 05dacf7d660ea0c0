"""The fork server's own program: `python -I -S _forkserver_main.py FD` (the standard library
only; see swarm.sandbox.forkserver for why it exists and for its client).

It is started once by a worker process, holding one end of a SOCK_SEQPACKET pair (FD). Each
message on it asks for one command: its body is empty, its descriptors are the command's own
stream socket (the reply channel), its stdin, stdout and stderr, then the namespaces to join.
The request itself (argv, environment, folder, cgroups, rlimits) comes over the command's
socket as a length-prefixed JSON object. The server forks (cheap: this process is small and has
one thread), the child joins the cgroups, sets the rlimits, joins the namespaces, starts a
session and execs; the server answers `P` and the PID (4 bytes), or `E`, a length and why,
and later the command's wait status (4 bytes), then closes that socket. When the worker process
ends (its end of FD closes), the server ends, and so do the commands it started.
"""

import contextlib
import ctypes
import json
import os
import resource
import selectors
import signal
import socket
import struct
import sys
from typing import Any

STATUS = struct.Struct(">i")
LENGTH = struct.Struct(">I")
REQUEST_LIMIT = 64 * 1024 * 1024
READ_SECONDS = 10.0


def read_request(conn: socket.socket) -> dict[str, Any]:
    conn.settimeout(READ_SECONDS)  # a client that died between its two writes
    head = b""
    while len(head) < LENGTH.size:
        part = conn.recv(LENGTH.size - len(head))
        if not part:
            raise EOFError("the request ended early")
        head += part
    (size,) = LENGTH.unpack(head)
    if size > REQUEST_LIMIT:
        raise ValueError(f"a request of {size} bytes")
    body = bytearray()
    while len(body) < size:
        part = conn.recv(min(1 << 20, size - len(body)))
        if not part:
            raise EOFError("the request ended early")
        body += part
    conn.settimeout(None)
    request: dict[str, Any] = json.loads(body)
    return request


def child(
    request: dict[str, Any], stdio: list[int], spaces: list[int], report: int, libc: Any
) -> None:
    """In the forked child: never returns (execs, or reports why not and exits 127)."""
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        os.setsid()
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)  # (dup2 clears close-on-exec on the target)
        for path in request["cgroups"]:
            with contextlib.suppress(OSError):
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)
        for which, value in request["rlimits"]:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(which, (value, value))
        for fd, kind in zip(spaces, request["namespaces"], strict=True):
            if libc.setns(fd, kind) != 0:
                number = ctypes.get_errno()
                raise OSError(number, f"setns: {os.strerror(number)}")
        if request["cwd"]:
            os.chdir(request["cwd"])
        argv = request["argv"]
        env = request["env"]
        if os.path.dirname(argv[0]):
            os.execve(argv[0], argv, env)
        os.execvpe(argv[0], argv, env)
    except BaseException as exc:  # everything is reported, then the child ends
        number = getattr(exc, "errno", None) or 0
        message = getattr(exc, "strerror", None) or str(exc)
        with contextlib.suppress(OSError):
            os.write(report, f"{type(exc).__name__}:{number:x}:{message}".encode()[:4000])
    finally:
        os._exit(127)


def spawn(message_fds: list[int], running: dict[int, socket.socket], libc: Any) -> None:
    conn = socket.socket(fileno=message_fds[0])
    stdio, spaces = message_fds[1:4], message_fds[4:]
    try:
        try:
            request = read_request(conn)
        except (OSError, EOFError, ValueError) as exc:
            with contextlib.suppress(OSError):
                said = f"RuntimeError:0:the fork server could not read it ({exc})".encode()
                conn.sendall(b"E" + LENGTH.pack(len(said)) + said)
            conn.close()
            return
        report_read, report_write = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            os.close(report_read)
            child(request, stdio, spaces, report_write, libc)
        os.close(report_write)
        said = b""
        while part := os.read(report_read, 4096):
            said += part
        os.close(report_read)
        if said:
            os.waitpid(pid, 0)
            with contextlib.suppress(OSError):
                conn.sendall(b"E" + LENGTH.pack(len(said)) + said)
            conn.close()
            return
        with contextlib.suppress(OSError):
            conn.sendall(b"P" + LENGTH.pack(pid))
        running[pid] = conn
    finally:
        for fd in message_fds[1:]:
            with contextlib.suppress(OSError):
                os.close(fd)


def drain(fd: int) -> None:
    """Read a non-blocking pipe until it is empty."""
    with contextlib.suppress(OSError):
        while os.read(fd, 512):
            continue


def reap(running: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = running.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(STATUS.pack(status))
            conn.close()


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the worker's to handle
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    running: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                try:
                    message, fds, _, _ = socket.recv_fds(control, 16, 16, socket.MSG_CMSG_CLOEXEC)
                except ConnectionError:
                    message, fds = b"", []
                if not message:  # the worker process is gone: so is everything it started
                    for pid in running:
                        with contextlib.suppress(OSError):
                            os.killpg(pid, signal.SIGKILL)
                    return
                if len(fds) >= 4:
                    spawn(fds, running, libc)
                else:
                    for fd in fds:
                        os.close(fd)
            else:
                drain(wake_read)  # the SIGCHLD wake-ups; then every ended command is reaped
                reap(running)


if __name__ == "__main__":
    main()
