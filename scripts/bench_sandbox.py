#!/usr/bin/env python3
"""What containing agents costs: per-command overhead (bare, none, bwrap, docker exec), p50 and
p99; opening a box; memory per contained worker; bwrap from a worker process the size of a
busy one, its commands started by the fork server against forking the worker; and the scale
task run by 64 and 256 simulated workers contained (bwrap, the default) against the same
uncontained, in one sitting.

    .venv/bin/python scripts/bench_sandbox.py [--quick] [--json] [--sizes 64,256]
                                              [--scale-backends none,bwrap,docker]

A command is `true` (nothing but the cost of getting it started and its end seen); "bare" is
`subprocess.run` with no box, "none" the unconfined box (an allow-listed environment only). The
boxes are a worker's: with network, the hub's URL set, so bwrap's and docker's reach it through
their relay (the figures include joining the box's network namespace, and opening it).
Docker is skipped, saying why, where no engine answers or its image is missing
(scripts/build-sandbox-image). The scale runs are scripts/scale_sim.py's, one unit per worker.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import Figures, machine, parser, percentile

from swarm.errors import InvalidInput
from swarm.sandbox import Box, BoxSpec, Sandbox, get_sandbox, popen, run
from swarm.sandbox.env import base_env

MIB = 2**20


def available(name: str, figures: Figures) -> Sandbox | None:
    try:
        return get_sandbox(name)
    except InvalidInput as exc:
        figures.log(f"{name}: skipped: {exc}")
        return None


def timed(action: Any, reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return times


def commands(figures: Figures, backends: dict[str, Sandbox], reps: int, root: Path) -> None:
    """p50/p99 of one `true`, and each backend's p50 over bare's."""
    env = base_env()
    bare = timed(lambda: subprocess.run(["true"], env=env, check=True), reps)
    figures.add("command p50", 1e3 * percentile(bare, 50), "ms", backend="bare")
    figures.add("command p99", 1e3 * percentile(bare, 99), "ms", backend="bare")
    worker = {**env, "SWARM_HUB_URL": "http://127.0.0.1:9"}  # a relay, as a worker's box has
    for name, sandbox in backends.items():
        opened = []
        folder = root / f"commands-{name}"  # (docker gives its folder to the box's user)
        folder.mkdir()
        started = time.perf_counter()
        box = sandbox.open(BoxSpec(name=f"bench-{name}", checkout=folder, env=worker))
        opened.append(time.perf_counter() - started)
        try:
            run(box, ["true"], timeout=60)  # a first command warms caches
            times = timed(lambda b=box: run(b, ["true"], timeout=60), reps)  # type: ignore[misc]
        finally:
            box.close()
        figures.add("command p50", 1e3 * percentile(times, 50), "ms", backend=name)
        figures.add("command p99", 1e3 * percentile(times, 99), "ms", backend=name)
        overhead = percentile(times, 50) - percentile(bare, 50)
        figures.add("overhead p50 over bare", 1e3 * overhead, "ms", backend=name)
        figures.add("open a box", 1e3 * opened[0], "ms", backend=name)


def large_worker(figures: Figures, sandbox: Sandbox, reps: int, root: Path) -> None:
    """bwrap's overhead from a worker process the size of a busy one (256 MiB resident, 16
    threads), with its commands started by the fork server and, interleaved in the same
    sitting, by forking the worker (`preexec_fn`, SWARM_SANDBOX_FORKSERVER=0)."""
    import threading

    ballast = [bytearray(MIB) for _ in range(256)]
    for block in ballast:
        block[::4096] = b"\1" * len(block[::4096])  # resident, not only reserved
    stop = threading.Event()
    idle = [threading.Thread(target=stop.wait, daemon=True) for _ in range(16)]
    for thread in idle:
        thread.start()
    folder = root / "large-worker"
    folder.mkdir()
    worker = {**base_env(), "SWARM_HUB_URL": "http://127.0.0.1:9"}
    box = sandbox.open(BoxSpec(name="bench-large", checkout=folder, env=worker))
    times: dict[str, list[float]] = {"fork server": [], "forking the worker": []}
    try:
        run(box, ["true"], timeout=60)
        for _ in range(reps):
            for how, flag in (("fork server", "1"), ("forking the worker", "0")):
                os.environ["SWARM_SANDBOX_FORKSERVER"] = flag
                times[how] += timed(lambda: run(box, ["true"], timeout=60), 1)
    finally:
        os.environ.pop("SWARM_SANDBOX_FORKSERVER", None)
        box.close()
        stop.set()
    for how, values in times.items():
        figures.add("command p50, worker of 256 MiB", 1e3 * percentile(values, 50), "ms",
                    backend="bwrap", note=how)  # fmt: skip
    from swarm.sandbox.forkserver import ForkServer

    server = psutil.Process(ForkServer.shared().process.pid)
    figures.add("memory of the fork server", server.memory_info().rss / MIB, "MiB",
                backend="bwrap", note="one per worker process, not per worker")  # fmt: skip
    del ballast


def _rss(processes: list[psutil.Process]) -> int:
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            total += process.memory_info().rss
    return total


def memory(figures: Figures, backends: dict[str, Sandbox], boxes: int, root: Path) -> None:
    """What a contained worker holds beyond its commands: bwrap's processes while a command
    runs (none between commands); a docker box's container (init, relay; its cgroup's usage)
    and its runtime shim on the host."""
    env = base_env()
    if "bwrap" in backends:
        folder = root / "memory-bwrap"
        folder.mkdir()
        worker = {**env, "SWARM_HUB_URL": "http://127.0.0.1:9"}
        box = backends["bwrap"].open(BoxSpec(name="bench-mem", checkout=folder, env=worker))
        process = popen(box, ["sleep", "3"])
        time.sleep(1.0)
        with contextlib.suppress(psutil.Error):
            tree = [psutil.Process(process.pid), *psutil.Process(process.pid).children(True)]
            held = [p for p in tree if p.name() != "sleep"]
            figures.add("memory per box", _rss(held) / MIB, "MiB", backend="bwrap",
                        note="bwrap's processes, while a command runs")  # fmt: skip
        process.wait()
        box.close()
    if "docker" in backends:
        opened: list[Box] = []
        try:
            for index in range(boxes):
                name = f"bench-mem-{index}"
                folder = root / name
                folder.mkdir(exist_ok=True)
                env_hub = {**env, "SWARM_HUB_URL": "http://127.0.0.1:9"}  # a relay, as a worker's
                opened.append(
                    backends["docker"].open(BoxSpec(name=name, checkout=folder, env=env_hub))
                )
            time.sleep(2.0)
            used = []
            for box in opened:
                container = box.container  # type: ignore[attr-defined]
                container.reload()
                init = psutil.Process(int(container.attrs["State"]["Pid"]))
                shim = init.parent()
                inside = [init, *init.children(True)]
                used.append(_rss([*inside, *([shim] if shim else [])]))
            note = f"median of {boxes}: init, relay and the runtime shim (RSS)"
            median = statistics.median(used) / MIB
            figures.add("memory per box", median, "MiB", backend="docker", note=note)
        finally:
            for box in opened:
                box.close()


def scale(figures: Figures, sizes: list[int], backends: list[str], think: float) -> None:
    """scripts/scale_sim.py's run of N workers on N units, once per backend, one sitting."""
    import scale_sim

    from swarm.tasks.demo import make_scale_task

    root = Path(tempfile.mkdtemp(prefix="bench-sandbox-scale-"))
    for workers in sizes:
        task = make_scale_task(root / f"task-{workers}", units=workers)
        walls: dict[str, float] = {}
        for backend in backends:
            os.environ["SWARM_SANDBOX"] = backend  # the runs' default (RunPlan.sandbox)
            figures.log(f"scale: {workers} workers, sandbox {backend}")
            got = scale_sim.run_size(task, workers, think, root / backend, 1800.0, figures.log)
            walls[backend] = got["wall_time"]
            note = f"{got['units_on_main']}/{got['units']} units on main"
            figures.add("scale wall time", got["wall_time"], "s", backend=backend,
                        workers=workers, note=note)  # fmt: skip
            figures.add("scale peak memory", got["peak_rss_mib"], "MiB", backend=backend,
                        workers=workers)  # fmt: skip
        for backend in backends:
            if backend != "none" and "none" in walls:
                figures.add("scale contained / uncontained", walls[backend] / walls["none"], "x",
                            backend=backend, workers=workers)  # fmt: skip
    os.environ.pop("SWARM_SANDBOX", None)


def main() -> int:
    p = parser(__doc__)
    p.add_argument(
        "--sizes", help="worker counts of the scale runs (default 64,256; quick 8; 0: none)"
    )
    p.add_argument("--scale-backends", default="none,bwrap", help="sandboxes of the scale runs")
    p.add_argument("--think", type=float, help="seconds of simulated work a unit (default 2)")
    args = p.parse_args()
    figures = Figures(args.json)
    figures.log(f"machine: {machine()}; load {os.getloadavg()[0]:.1f}")
    reps = 20 if args.quick else 200
    backends = {n: s for n in ("none", "bwrap", "docker") if (s := available(n, figures))}
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        commands(figures, backends, reps, Path(tmp))
        memory(figures, backends, 2 if args.quick else 8, Path(tmp))
        if "bwrap" in backends:
            large_worker(figures, backends["bwrap"], reps // 2, Path(tmp))
    sizes = (
        [int(s) for s in args.sizes.split(",")] if args.sizes else [8] if args.quick else [64, 256]
    )
    wanted = [b for b in args.scale_backends.split(",") if b == "none" or b in backends]
    sizes = [n for n in sizes if n > 0]
    scale(figures, sizes, wanted, args.think or (0.5 if args.quick else 2.0))
    figures.table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
