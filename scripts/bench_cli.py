#!/usr/bin/env python3
"""How long `swarm` takes to answer: `swarm --help` (target under 0.5 s) and each command's
`--help`, which imports only that command's modules. Median of several fresh interpreters.

    scripts/bench_cli.py [--quick] [--json]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from _bench import ROOT, Figures, parser

COMMANDS = ["", "run", "demo", "doctor", "stop", "hub", "worker", "eval", "report", "task"]


def seconds(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "swarm", *args, "--help"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def main() -> None:
    options = parser(__doc__).parse_args()
    figures = Figures(options.json)
    repeat = 3 if options.quick else 9
    commands = COMMANDS[:3] if options.quick else COMMANDS
    seconds(["--version"])  # warm the file cache: the first start reads every .pyc from disk
    for command in commands:
        times = [seconds([command] if command else []) for _ in range(repeat)]
        name = f"swarm {command} --help".replace("  ", " ")
        figures.add(name, statistics.median(times), "s", f"median of {repeat}")
    figures.table()


if __name__ == "__main__":
    main()
