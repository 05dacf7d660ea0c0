"""The `bwrap` backend: each command runs in a fresh bubblewrap sandbox (Debian's `bubblewrap`).

What a command sees: the system (/usr and the dynamic loader's folders) and the Python that runs
`sw`, read-only; a few files of /etc; its checkout, read-write, at the same path; a private /tmp
(a size-limited tmpfs); its own /proc (PID namespace: no other process of the machine is in it)
and a minimal /dev. Nothing else of the host's file system exists inside: not the run
directory, not peers' checkouts, not the task, not the host's home, not the Docker socket.

It runs in new user and PID namespaces with no capabilities, in a new session
(no TIOCSTI into the worker's terminal), and dies with the worker. When a command ends, its PID
namespace ends with it, so nothing it started in the background survives it. (IPC, UTS and
cgroup namespaces are left out on purpose: each cost 2-5 ms a command, and a checkout shares
nothing through them.)

The network is never the host's. A box with network gets, once when it opens, user and network
namespaces of its own (a loopback and nothing else) in which a short-lived process listens on
127.0.0.1 at the hub's port and the CONNECT proxy's (`swarm.sandbox.relay.Routes`) and hands
the listening sockets to the worker process, whose `HostRelay` serves them: each connection a
command makes to the hub goes on to the hub, and a CLI agent's HTTPS_PROXY opens tunnels to its
model API only. Every command then joins those namespaces (`setns` between fork and exec, no
process or relay of its own) before bwrap builds its sandbox in them, so a command costs what
it did; nothing stays running between commands. A box without network (scoring, merge checks)
gets an empty network namespace of its own for each command.

Between fork and exec a command also joins the box's cgroups and takes its rlimits. The worker
process does not fork for it: `swarm.sandbox.forkserver` does (a small process, one per worker
process), so a command does not copy the page tables of a worker holding hundreds of MiB and
many threads (24.5 against 8.4 ms a command from a worker of 256 MiB, scripts/bench_sandbox.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import swarm
from swarm.errors import InvalidInput
from swarm.sandbox import BoxSpec, Launch
from swarm.sandbox.disk import DiskQuota
from swarm.sandbox.limits import CgroupSet, child_setup, preexec
from swarm.sandbox.relay import HostRelay, Routes

# The files of /etc a command may need (name lookups, TLS roots, locale, time zone, users).
ETC_FILES = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "ssl",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "hosts",
    "resolv.conf",
    "nsswitch.conf",
    "host.conf",
    "passwd",
    "group",
    "mime.types",
    "bash.bashrc",
    "profile",
    "inputrc",
    "python3",
    "python3.11",
)
SANDBOX_UID = 1000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
READY_SECONDS = 30.0
# Run in the box's new namespaces as `python -I -S -c LISTEN FD PORT...`: listen on 127.0.0.1 at
# each PORT and send the namespaces and the listening sockets to the worker over the socket FD.
LISTEN = r"""
import os, socket, sys
channel = socket.socket(fileno=int(sys.argv[1]))
held = []
for port in sys.argv[2:]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(port)))
    listener.listen(128)
    held.append(listener)
spaces = [os.open(f"/proc/self/ns/{name}", os.O_RDONLY) for name in ("user", "net")]
socket.send_fds(channel, [b"ready"], spaces + [listener.fileno() for listener in held])
"""
INSTALL_HINT = (
    "the bwrap sandbox needs bubblewrap: `apt-get install bubblewrap` (Debian, Ubuntu), "
    "`dnf install bubblewrap` (Fedora); or choose --sandbox docker, or --sandbox none to run "
    "agents unconfined"
)


def python_paths() -> list[Path]:
    """What running `sw` and the worker's Python needs, read-only: the interpreter's install,
    the virtual environment, and the `swarm` package itself (an editable install lives in the
    source tree, which is bound alone, not the folder around it)."""
    paths = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    paths.add(Path(swarm.__file__).resolve().parent)
    return sorted(p for p in paths if p not in (Path("/"), Path("/usr")))


# Of swarm's own code, a box holds only what `sw` runs: the rest of the package (the task
# generators, which write the demo's and the hazard workload's solutions and hidden tests, the
# reference implementations, the evaluator) would tell an agent what it is scored on.
SW_PACKAGE_PARTS = ("__init__.py", "tools")


def sw_only_package(package: Path) -> list[str]:
    """bwrap arguments that leave of the `swarm` package at `package` only SW_PACKAGE_PARTS
    (a small read-only tmpfs over it, with those parts bound back in)."""
    argv = ["--perms", "0555", "--size", str(1024 * 1024), "--tmpfs", str(package)]
    for part in SW_PACKAGE_PARTS:
        argv += ["--ro-bind", str(package / part), str(package / part)]
    return argv


def private_etc() -> Path:
    """A copy of the files of /etc a command needs (ETC_FILES), bound as the box's /etc in one
    mount: one bind a file cost a command about 10 ms more (measured in gVisor). Links to
    elsewhere stay links (their targets are bound); private keys stay out."""
    etc = Path(tempfile.mkdtemp(prefix="swarm-etc-")) / "etc"
    etc.mkdir()
    for name in ETC_FILES:
        source = Path("/etc") / name
        with contextlib.suppress(OSError, shutil.Error):
            if source.is_dir():
                shutil.copytree(
                    source, etc / name, symlinks=True, ignore=shutil.ignore_patterns("private")
                )
            elif source.exists():
                shutil.copy2(source, etc / name)  # resolv.conf may be a link into /run
    return etc


def stopped_notice(spec: BoxSpec, used: int) -> str:
    return (
        f"stopped: the checkout uses {used // (1024 * 1024)} MB on disk, past this sandbox's "
        f"quota of {spec.limits.disk_mb} MB (SWARM_SANDBOX_DISK_MB); delete what you do not need"
    )


def package_parent() -> str | None:
    """The folder to put on PYTHONPATH inside when `swarm` is not in site-packages."""
    parent = Path(swarm.__file__).resolve().parent.parent
    installed = {Path(p).resolve() for p in [*site.getsitepackages(), site.getusersitepackages()]}
    return None if parent in installed else str(parent)


class BwrapBox:
    def __init__(self, spec: BoxSpec, executable: str) -> None:
        self.spec = spec
        self.executable = executable
        self.cgroups = CgroupSet(spec.name, spec.limits)
        self.etc = private_etc()
        self.routes = Routes.of(spec)
        self.relay: HostRelay | None = None
        self.servers: list[Any] = []
        self.spaces: tuple[int, int] | None = None  # the network's user and net namespaces
        if self.routes is not None:
            try:
                self._open_network(self.routes)
            except BaseException:
                self.close()
                raise
        self.prefix = self._prefix()
        self.running: weakref.WeakSet[subprocess.Popen[Any]] = weakref.WeakSet()
        self.notice = ""
        DiskQuota.shared().watch(self, spec.checkout, spec.limits.disk_mb, self.over_quota)

    def _open_network(self, routes: Routes) -> None:
        """The box's network namespace, its listening sockets served by this process's relay."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = [
            self.executable, "--unshare-user", "--unshare-net", "--die-with-parent",
            "--new-session", "--ro-bind", "/", "/", "--",
            sys.executable, "-I", "-S", "-c", LISTEN, str(theirs.fileno()),
            *(str(port) for port in routes.ports),
        ]  # fmt: skip
        with ours, theirs, tempfile.TemporaryFile() as errors:
            process = subprocess.Popen(
                argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True,
            )  # fmt: skip
            theirs.close()
            ours.settimeout(READY_SECONDS)
            try:
                _, fds, _, _ = socket.recv_fds(ours, 16, 2 + len(routes.ports),
                                               socket.MSG_CMSG_CLOEXEC)  # fmt: skip
            except OSError:
                fds = []
            finally:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(READY_SECONDS)
                if process.poll() is None:
                    process.kill()
                    process.wait()
            if len(fds) != 2 + len(routes.ports):
                for fd in fds:
                    os.close(fd)
                errors.seek(0)
                said = errors.read().decode(errors="replace").strip().splitlines()
                raise OSError(
                    f"the bwrap box's network did not open (exit {process.returncode}): "
                    + (said[-1] if said else "no output")
                )
        self.spaces = (fds[0], fds[1])
        try:
            can_join(*self.spaces)
        except InvalidInput:
            for fd in fds:
                os.close(fd)
            self.spaces = None
            raise
        listeners = {
            port: socket.socket(fileno=fd) for port, fd in zip(routes.ports, fds[2:], strict=True)
        }
        self.relay = HostRelay.shared()
        self.servers = self.relay.serve(routes, listeners.__getitem__, lambda: self.spec.reach)

    def started(self, process: subprocess.Popen[Any]) -> None:
        self.running.add(process)

    def over_quota(self, used: int) -> None:
        """Past the disk quota: every command of the box is stopped."""
        self.notice = stopped_notice(self.spec, used)
        for process in list(self.running):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
        self.cgroups.kill_all()

    def _prefix(self) -> list[str]:
        spec = self.spec
        argv = [
            self.executable,
            "--unshare-user",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--unshare-pid",
            "--die-with-parent",
            "--new-session",
            "--cap-drop", "ALL",
            "--ro-bind", "/usr", "/usr",
        ]  # fmt: skip
        if self.spaces is None:  # else in the box's network namespace (`joining`)
            argv.append("--unshare-net")
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            path = Path("/") / name
            if path.is_symlink():
                argv += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                argv += ["--ro-bind", str(path), str(path)]
        argv += ["--ro-bind", str(self.etc), "/etc"]
        argv += [
            "--proc", "/proc",
            "--dev", "/dev",
            "--size", str(spec.limits.tmp_mb * 1024 * 1024), "--tmpfs", "/tmp",
        ]  # fmt: skip
        # After the private /tmp, or it would hide what lives under /tmp: a virtual environment
        # (a clone in a temporary folder), the extra paths.
        for path in python_paths():
            argv += ["--ro-bind", str(path), str(path)]
        argv += sw_only_package(Path(swarm.__file__).resolve().parent)
        for path in spec.hidden:
            if path.is_dir() and not path.is_symlink():
                argv += ["--tmpfs", str(path)]
            elif path.exists():  # a symlink: what it points to is covered
                argv += ["--ro-bind", "/dev/null", str(path)]
        for path in spec.extra_ro:
            argv += ["--ro-bind", str(path), str(path)]
        argv += ["--bind", str(spec.checkout), str(spec.checkout)]
        # The root bwrap builds the sandbox in is a tmpfs: read-only too, but for /tmp and the
        # checkout (mounts of their own).
        argv += ["--remount-ro", "/"]
        return argv

    def launch(self, argv: Sequence[str], *, cwd: Path | None = None) -> Launch:
        where = cwd or self.spec.checkout
        env = dict(self.spec.env)
        if self.routes is not None:  # inside, the hub is on the box's loopback
            env = self.routes.env(env, self.spec.reach)
        parent = package_parent()
        if parent and "PYTHONPATH" not in env:
            env["PYTHONPATH"] = parent
        limits = preexec(self.spec.limits, self.cgroups)
        setup = child_setup(self.spec.limits, self.cgroups)
        if self.spaces is not None:  # user first: it owns the network namespace
            user, net = self.spaces
            setup = replace(setup, namespaces=((user, CLONE_NEWUSER), (net, CLONE_NEWNET)))
        return Launch(
            [*self.prefix, "--chdir", str(where), "--", *argv],
            env,
            None,
            limits if self.spaces is None else joining(limits, *self.spaces),
            setup=setup,
        )

    def close(self) -> None:
        DiskQuota.shared().unwatch(self)
        if self.relay is not None:
            for server in self.servers:
                self.relay.stop(server)
        self.servers.clear()
        if self.spaces is not None:
            for fd in self.spaces:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.spaces = None
        self.cgroups.close()
        shutil.rmtree(self.etc.parent, ignore_errors=True)


_libc: Any = None


def _setns(fd: int, kind: int) -> None:
    if _libc.setns(fd, kind) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"setns: {os.strerror(number)}")


def joining(first: Callable[[], None], user: int, net: int) -> Callable[[], None]:
    """`first`, then into the box's user and network namespaces (in the child, before exec:
    bwrap then builds the command's sandbox, its own user namespace nested in that one)."""
    global _libc
    if _libc is None:  # loaded here, never between fork and exec
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]

    def apply() -> None:
        first()
        _setns(user, CLONE_NEWUSER)
        _setns(net, CLONE_NEWNET)

    return apply


_JOINS: list[bool] = []  # whether a process of this one could join a box's namespaces


def can_join(user: int, net: int) -> None:
    """Once a process: whether a child can enter a box's namespaces here (where the kernel
    refuses `setns`, every command would fail with no word of why)."""
    if _JOINS:
        return
    joining(lambda: None, user, net)  # loads libc, here and not in the child

    def probe() -> None:
        try:
            _setns(user, CLONE_NEWUSER)
            _setns(net, CLONE_NEWNET)
        except OSError as exc:
            os.write(2, str(exc).encode())
            os._exit(1)

    done = subprocess.run(["true"], preexec_fn=probe, capture_output=True, check=False)
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
        raise InvalidInput(
            f"the bwrap sandbox cannot put commands in their box's network namespace here "
            f"({why}); choose --sandbox docker, or --sandbox none to run agents unconfined"
        )
    _JOINS.append(True)


class BwrapSandbox:
    name = "bwrap"

    def __init__(self, executable: str | None = None) -> None:
        found = shutil.which(executable or os.environ.get("SWARM_BWRAP_BIN") or "bwrap")
        if not found:
            raise InvalidInput(INSTALL_HINT)
        self.executable = found

    def open(self, spec: BoxSpec) -> BwrapBox:
        return BwrapBox(spec, self.executable)
