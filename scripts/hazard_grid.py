"""Ablations on the hazard workload with the sim: time to all units merged, duplicated work,
merge conflicts and repeated failures for each (workers, switches, seed).

    .venv/bin/python scripts/hazard_grid.py [--quick] [--json] [--workers 16] \
        [--ablations ,claims,context,dms] [--seeds 1,2] [--think 1.0]

`swarm experiment PLAN.toml` runs such grids with repeats, resumably, and `swarm report` gives
their intervals (docs/experiments.md); this script stays as a quick benchmark without a plan.

Each cell prepares examples/tasks/hazard with the seed (a fresh copy in a temporary folder)
and runs `swarm run --harness sim --without ...` on it; figures come from the run's measures
(swarm.report.measures), see docs/experiments.md. `--quick`: 4 workers, all on vs no claims,
one seed, 16 units, think 0.5 s (about 3 minutes at think 2 on the loaded 2-core machine).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from _bench import Figures, parser

from swarm.report.measures import measure
from swarm.report.source import open_run

ROOT = Path(__file__).resolve().parent.parent
MEASURES = (("time_to_all", "s"), ("duplicated_work", "count"), ("conflicts", "count"),
            ("repeated_failures", "count"), ("failed_attempts", "count"))  # fmt: skip


def prepare(seed: int, units: int | None, into: Path) -> Path:
    task = into / f"hazard-{seed}"
    shutil.copytree(ROOT / "examples" / "tasks" / "hazard", task)
    toml = (task / "task.toml").read_text()
    options = tomllib.loads(toml)["prepare_options"]
    toml = toml.replace(f"seed = {options['seed']}", f"seed = {seed}")
    if units:
        toml = toml.replace(f"units = {options['units']}", f"units = {units}")
    (task / "task.toml").write_text(toml)
    swarm = str(Path(sys.executable).with_name("swarm"))
    subprocess.run([swarm, "task", "prepare", str(task)], check=True, capture_output=True)
    return task


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--workers", default="16", help="Comma-separated worker counts.")
    p.add_argument(
        "--ablations",
        default=",claims,context,dms",
        help="Comma-separated switches, one cell each ('' = all on; a+b = both).",
    )
    p.add_argument("--seeds", default="1,2")
    p.add_argument("--think", type=float, default=2.0)
    p.add_argument("--units", type=int, default=None, help="Default: the task's.")
    p.add_argument("--budget", default="10m")
    args = p.parse_args()
    if args.quick:
        args.workers, args.ablations, args.seeds, args.units = "4", ",claims", "1", 16
        args.think = min(args.think, 0.5)
    figures = Figures(args.json)
    # On a loaded machine a worker process's heartbeats come late; taking its workers for dead
    # (after SWARM_DEAD_AFTER, 30 s by default) would measure the machine, not the mechanisms.
    env = {**os.environ, "SWARM_DEAD_AFTER": os.environ.get("SWARM_DEAD_AFTER", "120")}
    swarm = str(Path(sys.executable).with_name("swarm"))
    with tempfile.TemporaryDirectory(prefix="hazard-grid-") as tmp:
        for seed in [int(s) for s in args.seeds.split(",")]:
            task = prepare(seed, args.units, Path(tmp))
            for workers in [int(w) for w in args.workers.split(",")]:
                for ablation in args.ablations.split(","):
                    without = ablation.replace("+", ",")
                    run_dir = Path(tmp) / f"run-{seed}-{workers}-{ablation or 'all'}"
                    started = time.monotonic()
                    subprocess.run(
                        env=env,
                        args=[swarm, "run", str(task), "--workers", str(workers), "--think",
                         str(args.think), "--budget", args.budget, "--eval-every", "5s",
                         "--quiet", "--run-dir", str(run_dir), "--without", without],
                        check=True, capture_output=True,
                    )  # fmt: skip
                    wall = time.monotonic() - started
                    with open_run(run_dir) as source:
                        got = measure(source).figures()
                    cell = {"workers": workers, "without": ablation or "-", "seed": seed}
                    figures.log(f"{cell}: {wall:.0f}s {got}")
                    figures.add("wall time of the run", wall, "s", **cell)
                    for name, unit in MEASURES:
                        value = got.get(name)
                        if value is not None:
                            figures.add(name, float(value), unit, **cell)
    figures.table()


if __name__ == "__main__":
    main()
