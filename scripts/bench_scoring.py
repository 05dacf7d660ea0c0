"""What a scoring costs: the demo task (49 hidden tests) scored as the evaluator does it (a fresh
copy, canaries, pytest isolated, bwrap with no network), unconfined (`--sandbox none`), and as
pytest alone in a checkout; the scale task (`--units`, one hidden module each) the same way.

Prints the median of each (`--quick`: 3 scorings each and 64 scale units, within a minute; else
7 scorings and 256 units). `--json`: one {"figure", "value", "unit"} object per line.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _bench import Figures, parser, workdir

from swarm.evaluation import evaluate
from swarm.tasks import Task, apply_unit, load_units
from swarm.tasks.demo import make_demo_task, make_scale_task

GIT = [
    "git",
    "-c",
    "user.name=b",
    "-c",
    "user.email=b@example.com",
    "-c",
    "init.defaultBranch=main",
]


def solved_repo(task: Task, tmp: Path) -> tuple[Path, Path]:
    """A bare repository whose main holds the task solved, and a checkout of it."""
    checkout, bare = tmp / f"{task.name}-checkout", tmp / f"{task.name}.git"
    shutil.copytree(task.start_dir, checkout)
    for unit in load_units(task):
        apply_unit(unit, checkout)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "solved"]):
        subprocess.run([*GIT, *args], cwd=checkout, check=True, capture_output=True)
    subprocess.run([*GIT, "clone", "-q", "--bare", str(checkout), str(bare)], check=True)
    return bare, checkout


def median_seconds(run: object, times: int) -> float:
    assert callable(run)
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        run()
        spent.append(time.perf_counter() - started)
    return statistics.median(spent)


def measure(task: Task, tmp: Path, times: int, figures: Figures, label: str) -> None:
    bare, checkout = solved_repo(task, tmp)
    for sandbox in ("bwrap", "none"):
        ev = tmp / f"ev-{task.name}-{sandbox}"

        def score(ev: Path = ev, sandbox: str = sandbox) -> None:
            checkpoint = evaluate(task, bare, workdir=ev, sandbox=sandbox)
            assert checkpoint.status == "scored" and checkpoint.passed == checkpoint.total, (
                checkpoint.reason,
                checkpoint.output_tail[-500:],
            )

        figures.log(f"{label}: scoring with sandbox {sandbox}")
        figures.add(f"{label}: scoring, {sandbox}", median_seconds(score, times), "s")
    command = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", str(task.hidden_dir)]
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp)}

    def plain() -> None:
        subprocess.run(command, cwd=checkout, env=env, capture_output=True, check=True)

    figures.log(f"{label}: pytest alone in a checkout")
    figures.add(f"{label}: bare pytest", median_seconds(plain, times), "s")


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--units", type=int, help="Units of the scale task (default 64 / 256).")
    args = p.parse_args()
    times = 3 if args.quick else 7
    units = args.units or (64 if args.quick else 256)
    figures = Figures(args.json)
    with workdir("bench-scoring-") as tmp:
        measure(make_demo_task(tmp / "demo"), tmp, times, figures, "demo, 49 tests")
        scale = make_scale_task(tmp / "scale", units=units)
        measure(scale, tmp, times, figures, f"scale, {units} modules")
    figures.table()


if __name__ == "__main__":
    main()
