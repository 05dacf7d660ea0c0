"""The `docker` backend: each box (a worker's session, a merge check) is one container, kept
running for the box's life, its commands run through the Engine's exec API (Docker SDK).

What a command sees: the image's system and Python read-only (read-only root file system), the
checkout read-write at the same path, a private /tmp (a size-limited tmpfs), its container's
processes only, and `sw` and git. It runs as a non-root user with no capabilities and
`no-new-privileges`, under the container's memory, process and CPU limits; no Docker socket.

The network is `none`: a loopback only. The hub is reached through `swarm.sandbox.relay` (a
Unix socket bind-mounted into the box, listened to inside on 127.0.0.1 at the hub's port, so
the URLs in the checkout and in `SWARM_HUB_URL` work unchanged); a CLI agent's model API, named
in the spec's `reach`, through an HTTP CONNECT proxy that goes nowhere else. A box with
`network=False` (a merge check) has no relay at all.

The image is the project image (infra/Dockerfile on the debootstrap base): build it with
scripts/build-sandbox-image. This installation's `swarm` package is bound over the image's,
so `sw` inside is the worker's own.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import swarm
from swarm.errors import InvalidInput
from swarm.sandbox import BoxSpec, Launch
from swarm.sandbox.bwrap import SANDBOX_UID, SW_PACKAGE_PARTS, stopped_notice
from swarm.sandbox.disk import DiskQuota
from swarm.sandbox.docker_exec import ExecProcess
from swarm.sandbox.relay import INSIDE, HostRelay, Routes

DEFAULT_IMAGE = "swarm:local"
# Where infra/Dockerfile installs swarm (masked in boxes), and where the box gets `sw`'s part.
IMAGE_PACKAGE = "/opt/swarm/venv/lib/python3.11/site-packages/swarm"
SW_PACKAGE_DIR = "/opt/swarm-sw"
INSIDE_PATH = "/opt/swarm/venv/bin:/usr/local/bin:/usr/bin:/bin"
RELAY_DIR = "/run/swarm-box"  # where the relay's sockets are inside
RELAY_USER = "65534:65534"  # nobody
LABEL = "swarm.sandbox"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
READY_SECONDS = 60.0
MB = 1024 * 1024
BUILD_HINT = (
    "build it with scripts/build-sandbox-image (no registry needed: it builds on the "
    "debootstrap base swarm-base:bookworm), or name another with SWARM_DOCKER_IMAGE"
)


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class DockerSandbox:
    name = "docker"

    def __init__(self, image: str | None = None, client: Any = None) -> None:
        try:
            import docker
            from docker.errors import DockerException, ImageNotFound
        except ImportError:
            raise InvalidInput(
                "the docker sandbox needs the Docker SDK for Python: pip install 'swarm[docker]'"
            ) from None
        self.image = image or os.environ.get("SWARM_DOCKER_IMAGE") or DEFAULT_IMAGE
        try:
            self.client = client or docker.from_env(timeout=120)
            self.client.ping()
        except DockerException as exc:
            raise InvalidInput(
                f"the docker sandbox cannot reach a Docker engine ({exc}): start dockerd (or "
                "set DOCKER_HOST), or choose --sandbox bwrap"
            ) from None
        try:
            self.client.images.get(self.image)
        except ImageNotFound:
            raise InvalidInput(
                f"no image {self.image} on this Docker engine: {BUILD_HINT}"
            ) from None
        self._remove_orphans()

    def _remove_orphans(self) -> None:
        """Boxes of processes of this machine that died without closing them."""
        host = socket.gethostname()
        for container in self.client.containers.list(all=True, filters={"label": LABEL}):
            owner_host, _, pid = str(container.labels.get(LABEL, "")).rpartition(":")
            if owner_host != host or not pid.isdigit() or _alive(int(pid)):
                continue
            with contextlib.suppress(Exception):
                container.remove(force=True)

    def open(self, spec: BoxSpec) -> DockerBox:
        return DockerBox(self, spec)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def box_user(checkout: Path) -> tuple[int, int]:
    """The checkout's owner, unless that is root: then an unprivileged user, given the
    checkout (the agent must write it; root never runs in a box)."""
    info = checkout.stat()
    if info.st_uid != 0:
        return info.st_uid, info.st_gid
    for top, dirs, files in os.walk(checkout):
        for name in [*dirs, *files]:
            with contextlib.suppress(OSError):
                os.lchown(os.path.join(top, name), SANDBOX_UID, SANDBOX_UID)
    os.chown(checkout, SANDBOX_UID, SANDBOX_UID)
    return SANDBOX_UID, SANDBOX_UID


class DockerBox:
    wants_tty = True  # an interactive shell gets a terminal of its own (`swarm sandbox shell`)

    def __init__(self, sandbox: DockerSandbox, spec: BoxSpec) -> None:
        from docker.types import Mount

        self.spec = spec
        self.api = sandbox.client.api
        uid, gid = box_user(spec.checkout)
        self.user = f"{uid}:{gid}"
        self.relay = HostRelay.shared()
        self.servers: list[Any] = []
        self.sockets = Path(tempfile.mkdtemp(prefix="swarm-box-"))
        self.sockets.chmod(0o755)  # the relay (another user than the agent's) reaches in
        self.routes = Routes.of(spec)
        # The relay runs in every box: it serves the routes (if any) and holds the lifeline
        # that ends the container when this process dies (see relay.INSIDE).
        command = self._relay_command(self.routes)
        limits = spec.limits
        mounts = [
            Mount(str(spec.checkout), str(spec.checkout), type="bind"),
            *(Mount(str(p), str(p), type="bind", read_only=True) for p in spec.extra_ro),
        ]
        mounts.append(Mount(RELAY_DIR, str(self.sockets), type="bind", read_only=True))
        # Of swarm's own code the box holds only what `sw` runs (bwrap.SW_PACKAGE_PARTS): the
        # worker's own, first on PYTHONPATH, and the image's installed copy masked.
        package = Path(swarm.__file__).resolve().parent
        mounts.append(Mount(IMAGE_PACKAGE, None, type="tmpfs", tmpfs_size=1024 * 1024))
        mounts.append(Mount(SW_PACKAGE_DIR, None, type="tmpfs", tmpfs_size=1024 * 1024))
        for part in SW_PACKAGE_PARTS:
            mounts.append(
                Mount(f"{SW_PACKAGE_DIR}/swarm/{part}", str(package / part), type="bind",
                      read_only=True)
            )  # fmt: skip
        parent = SW_PACKAGE_DIR
        if spec.network and CA_BUNDLE.is_file():  # trusts what the host trusts (a proxy's CA)
            mounts.append(Mount(str(CA_BUNDLE), str(CA_BUNDLE), type="bind", read_only=True))
        self.package_parent = parent
        self.container: Any = None
        try:
            self.container = self._start(sandbox, command, mounts)
        except InvalidInput:
            self.close()
            raise
        except Exception as exc:  # the Engine refused (a limit it cannot set, …)
            self.close()
            raise OSError(f"the Engine did not start the box's container: {exc}") from exc
        self.notice = ""
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise
        DiskQuota.shared().watch(self, spec.checkout, limits.disk_mb, self.over_quota)

    def _start(self, sandbox: DockerSandbox, command: list[str], mounts: list[Any]) -> Any:
        from docker.errors import ImageNotFound
        from docker.types import Ulimit

        spec, limits = self.spec, self.spec.limits
        image = spec.image or sandbox.image  # the task's ([environment].image), else the project's
        try:
            sandbox.client.images.get(image)
        except ImageNotFound:
            raise InvalidInput(
                f"no image {image} on this Docker engine for {spec.name}'s box: "
                + ("build the task's image ([environment].image)" if spec.image else BUILD_HINT)
            ) from None
        return sandbox.client.containers.run(
            image,
            command,
            entrypoint=[],
            name=re.sub(r"[^a-zA-Z0-9_.-]", "-", f"swarm-{spec.name}-{uuid.uuid4().hex[:8]}"),
            labels={LABEL: _owner(), "swarm.box": spec.name},
            # The relay runs as nobody: the agent (another user, no capabilities) can neither
            # signal nor trace it; the agent's commands run as `self.user` (see `_spawn`).
            user=RELAY_USER,
            working_dir=str(spec.checkout),
            environment={"HOME": "/tmp", "PATH": INSIDE_PATH},
            detach=True,
            init=True,
            read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={limits.tmp_mb}m,mode=1777"},
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            pids_limit=limits.processes,
            mem_limit=limits.memory_mb * MB,
            memswap_limit=limits.memory_mb * MB,
            cpu_shares=max(2, int(1024 * limits.cpu_share)),
            ulimits=[
                Ulimit(name="fsize", soft=limits.file_size_mb * MB, hard=limits.file_size_mb * MB),
                Ulimit(name="core", soft=0, hard=0),
            ],
            mounts=mounts,
        )

    def over_quota(self, used: int) -> None:
        self.notice = stopped_notice(self.spec, used)
        self.reap(signal.SIGKILL)

    def _relay_command(self, routes: Routes | None) -> list[str]:
        ready, signalled = self.relay.ready_signal(self.sockets / "ready.sock")
        self.ready = signalled
        self.servers.append(ready)
        ports = routes.ports if routes is not None else []
        if routes is not None:
            self.servers += self.relay.serve(
                routes, lambda port: self.sockets / f"{port}.sock", lambda: self.spec.reach
            )
        return [
            "/usr/bin/python3", "-c", INSIDE, f"ready={RELAY_DIR}/ready.sock",
            *(f"127.0.0.1:{port}={RELAY_DIR}/{port}.sock" for port in ports),
        ]  # fmt: skip

    def _wait_ready(self) -> None:
        event = getattr(self, "ready", None)
        if event is None or event.wait(READY_SECONDS):
            return
        self.container.reload()
        logs = self.container.logs(tail=20).decode(errors="replace")
        raise OSError(f"the box's relay did not start in {READY_SECONDS:.0f}s: {logs.strip()}")

    # -- what runs inside ---------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """The spec's environment, as it must read inside (paths and the hub's address)."""
        env = dict(self.spec.env)
        # The image's programs, after what is bound in read-only (the task's environment).
        bound = [str(p) for p in self.spec.extra_ro]
        kept = [
            entry
            for entry in env.get("PATH", "").split(os.pathsep)
            if any(entry == b or entry.startswith(b.rstrip("/") + "/") for b in bound)
        ]
        env["PATH"] = os.pathsep.join([*kept, INSIDE_PATH])
        env.pop("PYTHONPATH", None)
        if self.package_parent:
            env["PYTHONPATH"] = self.package_parent
        if self.routes is not None:  # inside, the hub is on the box's loopback
            env = self.routes.env(env, self.spec.reach)
        return env

    def launch(self, argv: Sequence[str], *, cwd: Path | None = None) -> Launch:
        return Launch(list(argv), self.env(), cwd or self.spec.checkout, spawn=self._spawn)

    def _spawn(self, how: Launch, options: dict[str, Any]) -> ExecProcess:
        return ExecProcess(
            self.api, self.container.id, how.argv, env=how.env,
            cwd=str(how.cwd or self.spec.checkout), user=self.user, reap=self.reap, **options,
        )  # fmt: skip

    # -- processes ------------------------------------------------------------------------
    def _processes(self) -> set[int]:
        """Host PIDs of every process in the container (its cgroup; else the Engine's `top`)."""
        procs = getattr(self, "_procs_file", None)
        if procs is None:
            self.container.reload()
            procs = self._procs_file = _cgroup_procs(int(self.container.attrs["State"]["Pid"]))
        if procs is not None:
            with contextlib.suppress(OSError, ValueError):
                return {int(pid) for pid in procs.read_text().split()}
        top = self.container.top(ps_args="-eo pid")
        return {int(row[0]) for row in top.get("Processes") or []}

    def reap(self, sig: int = signal.SIGKILL) -> None:
        """`sig` to every process of the agent's user in the box: not its init or relay, which
        run as another user (the agent cannot become it: no capabilities)."""
        uid = self.user.split(":", 1)[0]
        with contextlib.suppress(Exception):
            for pid in self._processes():
                if _real_uid(pid) == uid:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, sig)

    def close(self) -> None:
        DiskQuota.shared().unwatch(self)
        if self.container is not None:
            with contextlib.suppress(Exception):
                self.container.remove(force=True)
        for server in self.servers:
            self.relay.stop(server)
        self.servers.clear()
        shutil.rmtree(self.sockets, ignore_errors=True)


def _real_uid(pid: int) -> str | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return line.split()[1]
    except OSError:
        return None
    return None


def _cgroup_procs(pid: int) -> Path | None:
    """The `cgroup.procs` file of the pids (v1) or unified (v2) cgroup `pid` is in."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    root = Path("/sys/fs/cgroup")
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        where = None
        if "pids" in controllers.split(","):
            where = root / "pids" / path.lstrip("/")
        elif controllers == "" and (root / "cgroup.controllers").is_file():
            where = root / path.lstrip("/")
        if where is not None and (where / "cgroup.procs").is_file():
            return where / "cgroup.procs"
    return None
