"""What the oracle costs: one run of the original program bare, in its bubblewrap sandbox, and
through the hub (POST /v1/oracle, as `sw oracle` calls it), alone and with 8 workers at once;
and the command-line runner scoring a prepared jq task with the oracle as the implementation.

The oracle is jq from a prepared examples/tasks/jq (`--task` for another prepared rebuild
task), else a copy of coreutils' sort. `swarm hub` runs in its own process (SQLite), with the
oracle published into its run directory and no rate limit. `--json`: one {"figure", "value",
"unit"} object per line; `--quick`: fewer calls, within a minute.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from _bench import (
    ROOT,
    Figures,
    database_url,
    hub,
    machine,
    parser,
    percentile,
    register,
    workdir,
)

from swarm.tasks.model import Task, load_task
from swarm.tasks.published import publish_task
from swarm.tasks.rebuild.oracle import (
    OracleProgram,
    elf_interpreter,
    published_oracle,
    write_manifest,
)
from swarm.tasks.rebuild.oracle_run import OracleLimits, OracleRequest, run_oracle

WORKERS = 8


def sort_task(root: Path) -> Task:
    (root / "start").mkdir(parents=True)
    (root / "hidden").mkdir()
    (root / "goal.md").write_text("Rebuild sort.\n")
    oracle = root / "oracle"
    oracle.mkdir()
    shutil.copy(shutil.which("sort") or "/usr/bin/sort", oracle / "sort")
    program = OracleProgram(oracle, "sort", "sort", elf_interpreter(oracle / "sort"), "sort", ())
    write_manifest(program)
    (root / "task.toml").write_text(
        'name = "sort"\neval_command = "true"\noracle = "oracle/sort"\n'
    )
    return load_task(root)


def timed(call: object, n: int) -> list[float]:
    took = []
    for _ in range(n):
        started = time.perf_counter()
        call()  # type: ignore[operator]
        took.append((time.perf_counter() - started) * 1000)
    return took


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--task", type=Path, help="A prepared rebuild task (default: examples/tasks/jq)")
    args = p.parse_args()
    n = 15 if args.quick else 60
    figures = Figures(args.json)
    figures.log(machine())
    with workdir("bench-oracle-") as tmp:
        task_dir = args.task or ROOT / "examples" / "tasks" / "jq"
        task = load_task(task_dir)
        if not task.is_prepared or task.oracle_path is None:
            figures.log(f"{task_dir} is not a prepared rebuild task: measuring with sort instead")
            task = sort_task(tmp / "sort-task")
        jq = task.name == "jq"
        args_, stdin = (["-c", "map(. * 2)"], b"[1, 2, 3]\n") if jq else (["-r"], b"b\na\n")
        run_dir = tmp / "run"
        publish_task(task, run_dir, harness="mini", team_size=WORKERS)
        program = published_oracle(run_dir)
        assert program is not None
        request = OracleRequest(tuple(args_), stdin)
        for sandbox in ("none", "bwrap"):
            took = timed(
                lambda s=sandbox: run_oracle(program, request, OracleLimits(), sandbox=s), n
            )
            label = "bare" if sandbox == "none" else "in bwrap"
            figures.log(f"{program.program} {label}: {n} runs")
            figures.add(f"{program.program} run, {label}: p50", percentile(took, 50), "ms")
            figures.add(f"{program.program} run, {label}: p99", percentile(took, 99), "ms")
        with (
            database_url("sqlite", tmp) as url,
            hub(url, run_dir, SWARM_RATE_ORACLE_PER_MINUTE="0") as process,
        ):
            tokens = [t for _name, t in register(process.url, process.operator_token, WORKERS)]
            body = {"args": args_, "stdin": stdin.decode()}
            with httpx.Client(base_url=process.url, timeout=60) as client:
                headers = {"Authorization": f"Bearer {tokens[0]}"}
                took = timed(
                    lambda: client.post(
                        "/v1/oracle", json=body, headers=headers
                    ).raise_for_status(),
                    n,
                )
            figures.add("POST /v1/oracle, 1 worker: p50", percentile(took, 50), "ms")
            figures.add("POST /v1/oracle, 1 worker: p99", percentile(took, 99), "ms")
            latencies: list[float] = []
            statuses: list[int] = []
            lock = threading.Lock()

            def loop(token: str) -> None:
                with httpx.Client(base_url=process.url, timeout=120) as c:
                    for _ in range(max(3, n // 4)):
                        started = time.perf_counter()
                        status = c.post(
                            "/v1/oracle", json=body, headers={"Authorization": f"Bearer {token}"}
                        ).status_code
                        with lock:
                            latencies.append((time.perf_counter() - started) * 1000)
                            statuses.append(status)

            figures.log(f"{WORKERS} workers calling the oracle at once")
            started = time.perf_counter()
            threads = [threading.Thread(target=loop, args=(t,)) for t in tokens]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - started
            ok = statuses.count(200)
            note = f"{ok} x 200, {len(statuses) - ok} other (concurrency 4)"
            figures.add(f"POST /v1/oracle, {WORKERS} workers: p50", percentile(latencies, 50), "ms")
            figures.add(
                f"POST /v1/oracle, {WORKERS} workers: p99",
                percentile(latencies, 99),
                "ms",
                note,
            )
            figures.add(f"oracle calls answered, {WORKERS} workers", ok / elapsed, "calls/s")
        tests = task.hidden_dir / "tests.jsonl"
        if jq and tests.is_file() and task.oracle_path is not None:
            lines = [line for line in tests.read_text().splitlines() if line.strip()]
            if args.quick:  # a sample, so that --quick ends within a minute
                lines = lines[:60]
            sample = tmp / "tests.jsonl"
            sample.write_text("\n".join(lines) + "\n")
            figures.log(
                f"cli_tests on {len(lines)} of the jq task's tests, jq as the implementation"
            )
            runner = ROOT / "swarm" / "evaluation" / "cli_tests.py"
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, str(runner), str(sample), "--", str(task.oracle_path)],
                cwd=tmp, capture_output=True, text=True, timeout=900,
            )  # fmt: skip
            seconds = time.perf_counter() - started
            summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "no output"
            figures.add(f"cli_tests, {len(lines)} tests (jq itself)", seconds, "s", summary)
            figures.add("cli_tests throughput (jq itself)", len(lines) / seconds, "tests/s")
    figures.table()


if __name__ == "__main__":
    main()
