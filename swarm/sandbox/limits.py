"""Resource limits for host-side sandboxes: a cgroup per sandbox where this process may make one
(root, cgroup v1 or v2), and rlimits always (they also bind where cgroups cannot be had).

A cgroup bounds the sandbox as a whole (a fork bomb meets `pids.max`, a memory hog the memory
limit), which rlimits cannot: RLIMIT_NPROC does not bind root at all and counts every process of
the user (the worker's own threads too), and memory rlimits are per process. The file-size
rlimit binds everyone and stops a single huge file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import uuid
from collections.abc import Callable
from pathlib import Path

from swarm.sandbox import SandboxLimits
from swarm.sandbox.forkserver import ChildSetup

log = logging.getLogger("swarm.sandbox")
CGROUP_ROOT = Path("/sys/fs/cgroup")
MB = 1024 * 1024


def _own_cgroup(controller: str) -> Path | None:
    """Where this process sits in `controller`'s hierarchy (v1), or in the unified one (v2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return CGROUP_ROOT / controller / path.lstrip("/")
    return None


class CgroupSet:
    """The cgroups of one sandbox (made on demand, removed by `close`); empty when none can be
    made here."""

    def __init__(self, name: str, limits: SandboxLimits) -> None:
        self.dirs: list[Path] = []
        self.bounds_memory = False
        tag = f"swarm-{os.getpid()}-{name}-{uuid.uuid4().hex[:6]}"
        unified = CGROUP_ROOT / "cgroup.controllers"
        if unified.is_file():  # cgroup v2
            own = Path("/proc/self/cgroup").read_text().strip().split("::", 1)[-1]
            self._make(
                CGROUP_ROOT / own.lstrip("/") / tag,
                {
                    "pids.max": str(limits.processes),
                    "memory.max": str(limits.memory_mb * MB),
                    "cpu.weight": str(max(1, min(10000, int(100 * limits.cpu_share)))),
                },
            )
            return
        wanted = {
            "pids": {"pids.max": str(limits.processes)},
            "memory": {"memory.limit_in_bytes": str(limits.memory_mb * MB)},
            "cpu": {"cpu.shares": str(max(2, int(1024 * limits.cpu_share)))},
        }
        for controller, values in wanted.items():
            base = _own_cgroup(controller)
            if base is not None:
                self._make(base / tag, values)

    def _make(self, path: Path, values: dict[str, str]) -> None:
        try:
            path.mkdir()
        except OSError:
            return  # not root, or the hierarchy is read-only here: rlimits still apply
        self.dirs.append(path)
        for key, value in values.items():
            try:
                (path / key).write_text(value)
            except OSError:  # a controller not enabled in this subtree
                continue
            self.bounds_memory |= key.startswith("memory.")

    def kill_all(self) -> None:
        for path in self.dirs:
            _kill_all(path)

    def close(self) -> None:
        for path in self.dirs:
            for _ in range(50):  # the last processes may still be exiting
                try:
                    path.rmdir()
                    break
                except OSError:
                    _kill_all(path)
                    os.sched_yield()


def _kill_all(path: Path) -> None:
    with contextlib.suppress(OSError):
        for pid in (path / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                os.kill(int(pid), 9)


def child_setup(limits: SandboxLimits, cgroups: CgroupSet | None) -> ChildSetup:
    """What a command's process does between fork and exec, as data: join the cgroups, set
    the rlimits (the fork server does it, or `preexec`'s function)."""
    size = limits.file_size_mb * MB
    rlimits = [(resource.RLIMIT_FSIZE, size), (resource.RLIMIT_CORE, 0)]
    if cgroups is None or not cgroups.bounds_memory:
        # Per process, and on writable private memory only: an address-space limit would
        # break runtimes that reserve large ranges up front (V8, the JVM, Go).
        rlimits.append((resource.RLIMIT_DATA, limits.memory_mb * MB))
    procs = tuple(str(path / "cgroup.procs") for path in (cgroups.dirs if cgroups else []))
    return ChildSetup(cgroup_procs=procs, rlimits=tuple(rlimits))


def preexec(limits: SandboxLimits, cgroups: CgroupSet | None) -> Callable[[], None]:
    """What the child does between fork and exec (`child_setup`), as a `preexec_fn`."""
    return apply_setup(child_setup(limits, cgroups))


def apply_setup(setup: ChildSetup) -> Callable[[], None]:
    """`setup`'s cgroups and rlimits as a `preexec_fn` (its namespaces are the caller's)."""

    def apply() -> None:
        for procs in setup.cgroup_procs:
            with contextlib.suppress(OSError):
                Path(procs).write_text("0")
        for which, value in setup.rlimits:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(which, (value, value))

    return apply
