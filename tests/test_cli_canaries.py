"""Canaries for command-line tests: an honest implementation scores every real test, one that
looks its answers up in the tests file is `tampered` (real sandboxed scorings)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from swarm.evaluation import cli_tests, evaluate
from swarm.evaluation.canary_cli import plant_cli_tests
from swarm.tasks.model import Task, load_task

HONEST = """
import sys
what = sys.argv[1]
text = sys.stdin.read()
if what == "upper":
    sys.stdout.write(text.upper())
elif what == "count":
    print(len(text.split()))
else:
    sys.stderr.write("impl: unknown command\\n")
    sys.exit(2)
"""
# Answers from the tests file, found on the runner's command line: the first (or last) test
# with the same arguments and input.
LOOKUP = """
import json, os, sys
argv = open(f"/proc/{os.getppid()}/cmdline").read().split("\\0")
tests = [json.loads(line) for line in open(next(a for a in argv if a.endswith(".jsonl")))]
text = sys.stdin.read()
found = [t for t in tests if t["args"] == sys.argv[1:] and t.get("stdin", "") == text]
pick = found[PICK]
sys.stdout.write(pick.get("stdout") or "")
sys.stderr.write(pick.get("stderr_contains") or "")
sys.exit(pick.get("exit_code") or 0)
"""
TESTS = [
    {"id": "t.test:1", "args": ["upper"], "stdin": "ab\n", "stdout": "AB\n"},
    {"id": "t.test:5", "args": ["count"], "stdin": "a b c", "stdout": "3", "match": "json"},
    {"id": "t.test:9", "args": ["upper"], "stdin": "x", "stdout": "X"},
    {"id": "t.test:12", "args": ["nope"], "exit_code": 2, "stderr_contains": "unknown"},
]


def cli_task(tmp_path: Path, implementation: str) -> tuple[Task, Path]:
    root = tmp_path / "task"
    (root / "start" / "impl").mkdir(parents=True)
    (root / "start" / "impl" / "__main__.py").write_text(implementation)
    (root / "hidden").mkdir()
    (root / "hidden" / "tests.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TESTS))
    (root / "hidden" / "cli_tests.py").write_text(Path(cli_tests.__file__).read_text())
    (root / "goal.md").write_text("goal")
    command = (
        'PYTHONPATH="$PWD" python {hidden}/cli_tests.py {hidden}/tests.jsonl -- python -m impl'
    )
    (root / "task.toml").write_text(f"name = 'cli'\neval_command = '{command}'\n")
    repo = tmp_path / "repo"
    subprocess.run(["cp", "-r", str(root / "start"), str(repo)], check=True)
    git = [
        "git",
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.com",
        "-c",
        "init.defaultBranch=main",
    ]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "impl"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    return load_task(root), repo


def test_planted_canaries_copy_real_tests_and_cannot_pass(tmp_path: Path) -> None:
    path = tmp_path / "tests.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TESTS))
    canaries = plant_cli_tests(tmp_path, f"python x {path} -- impl", count=3)
    tests = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(canaries.ids) == 6 and len(tests) == 10
    real = {t["id"]: t for t in TESTS}
    for canary in (t for t in tests if t["id"] not in real):
        assert f"tests.jsonl::{canary['id']}" in canaries.ids
        assert canary["id"].startswith("t.test:") and canary["id"][7:].isdigit()
        twin = next(
            t for t in TESTS if (t["args"], t.get("stdin")) == (canary["args"], canary.get("stdin"))
        )
        # What the real test expects does not meet the canary.
        as_canary = cli_tests.parse_test(canary, "canary")
        stdout = twin.get("stdout") or ""
        assert cli_tests.compare(as_canary, twin.get("exit_code", 0) or 0, stdout, "unknown\n")


def test_an_honest_implementation_scores_and_a_lookup_is_tampered(tmp_path: Path) -> None:
    task, repo = cli_task(tmp_path / "honest", HONEST)
    honest = evaluate(task, repo, workdir=tmp_path / "ev1")
    assert (honest.status, honest.passed, honest.total) == ("scored", 4, 4), honest.output_tail
    assert sorted(honest.tests) == sorted(f"tests.jsonl::{t['id']}" for t in TESTS)
    for pick in ("0", "-1"):  # the first match, the last
        task, repo = cli_task(tmp_path / f"lookup{pick}", LOOKUP.replace("PICK", pick))
        forged = evaluate(task, repo, workdir=tmp_path / f"ev{pick}")
        assert forged.status == "tampered", forged.output_tail
        assert forged.reason is not None and "canary tests" in forged.reason
