"""The command-line test runner (swarm/evaluation/cli_tests.py), run as the eval command runs
it: a standalone script against a real implementation, each test a real process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from swarm.evaluation import cli_tests
from swarm.evaluation.parse import parse_counts, parse_tests

IMPLEMENTATION = r"""#!/usr/bin/env python3
import os, signal, subprocess, sys, time
what = sys.argv[1]
if what == "echo":
    sys.stdout.write(sys.stdin.read())
elif what == "upper":
    sys.stdout.write(sys.stdin.read().upper())
elif what == "exit":
    sys.exit(int(sys.argv[2]))
elif what == "sleep":
    time.sleep(float(sys.argv[2]))
elif what == "crash":
    os.kill(os.getpid(), signal.SIGSEGV)
elif what == "json":
    print('{"b": 2, "a": 1.0}')
    print("[1, 2]")
elif what == "cat":
    sys.stdout.write(open(sys.argv[2]).read())
elif what == "err":
    sys.stderr.write("impl: bad thing happened\n")
    sys.exit(3)
elif what == "flood":
    while True:
        sys.stdout.write("x" * 65536)
elif what == "orphan":  # leaves a child behind in its group, holding nothing
    subprocess.Popen(["sleep", "60"])
    print("done")
elif what == "pwd":
    print(sorted(os.listdir(".")))
"""


def write_tests(path: Path, tests: list[dict[str, Any]]) -> Path:
    path.write_text("# a comment line\n\n" + "".join(json.dumps(t) + "\n" for t in tests))
    return path


def run(
    tmp_path: Path, tests: list[dict[str, Any]], *extra: str
) -> subprocess.CompletedProcess[str]:
    impl = tmp_path / "impl"
    impl.write_text(IMPLEMENTATION)
    impl.chmod(0o755)
    file = write_tests(tmp_path / "tests.jsonl", tests)
    runner = Path(cli_tests.__file__)
    return subprocess.run(
        [sys.executable, str(runner), str(file), "--jobs", "4", *extra, "--", "./impl"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


CASES: list[dict[str, Any]] = [
    {"id": "echo", "args": ["echo"], "stdin": "hello\n", "stdout": "hello\n"},
    {"id": "stdin-upper", "args": ["upper"], "stdin": "abc", "stdout": "ABC"},
    {"id": "wrong-output", "args": ["upper"], "stdin": "abc", "stdout": "abc"},
    {"id": "exit-4", "args": ["exit", "4"], "stdout": "", "exit_code": 4},
    {"id": "exit-unexpected", "args": ["exit", "4"], "stdout": ""},
    {"id": "exit-unchecked", "args": ["exit", "9"], "exit_code": None},
    {"id": "slow", "args": ["sleep", "30"], "timeout": 1},
    {"id": "crash", "args": ["crash"]},
    {"id": "json-equal", "args": ["json"], "match": "json", "stdout": '{"a":1,"b":2.0}\n[1,2]'},
    {"id": "json-differs", "args": ["json"], "match": "json", "stdout": '{"a":1,"b":3}\n[1,2]'},
    {"id": "exact-not-json", "args": ["json"], "stdout": '{"a":1,"b":2}\n[1,2]\n'},
    {"id": "stderr", "args": ["err"], "exit_code": 3, "stderr_contains": "bad thing"},
    {"id": "stderr-wrong", "args": ["err"], "exit_code": 3, "stderr_contains": "other"},
    {"id": "files", "args": ["cat", "d/in.txt"], "files": {"d/in.txt": "x\n"}, "stdout": "x\n"},
    {"id": "fresh-folder", "args": ["pwd"], "stdout": "[]\n"},
    {"id": "orphan", "args": ["orphan"], "stdout": "done\n"},
]


def test_each_test_is_scored_on_its_own(tmp_path: Path) -> None:
    started = time.monotonic()
    done = run(tmp_path, CASES)
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    outcomes = parse_tests(done.stdout)
    assert outcomes == {
        f"tests.jsonl::{case['id']}": outcome
        for case, outcome in zip(
            CASES,
            [
                *("passed", "passed", "failed", "passed", "failed", "passed", "failed", "failed"),
                *("passed", "failed", "failed", "passed", "failed", "passed", "passed", "passed"),
            ],
            strict=True,
        )
    }, done.stdout
    assert parse_counts(done.stdout) == (9, 16)
    lines = {line.split(" - ")[0]: line for line in done.stdout.splitlines()}
    assert "timed out after 1s" in lines["FAILED tests.jsonl::slow"]
    assert "killed by signal SIGSEGV" in lines["FAILED tests.jsonl::crash"]
    assert 'stdout "ABC", expected "abc"' in lines["FAILED tests.jsonl::wrong-output"]
    assert "exit code 4, expected 0" in lines["FAILED tests.jsonl::exit-unexpected"]
    assert 'does not contain "other"' in lines["FAILED tests.jsonl::stderr-wrong"]
    # The slow test ran into its own 1 s limit, not the runner's default 10 s.
    assert elapsed < 30


def test_a_run_that_passes_everything_exits_0(tmp_path: Path) -> None:
    done = run(tmp_path, [CASES[0], CASES[1]])
    assert done.returncode == 0 and parse_counts(done.stdout) == (2, 2)
    assert done.stdout.splitlines()[-1].startswith("2 passed, 0 failed in ")


def test_an_implementation_that_floods_its_output_fails_only_its_test(tmp_path: Path) -> None:
    done = run(tmp_path, [{"id": "flood", "args": ["flood"], "timeout": 30}, CASES[0]])
    outcomes = parse_tests(done.stdout)
    assert outcomes == {"tests.jsonl::flood": "failed", "tests.jsonl::echo": "passed"}


def test_a_missing_implementation_fails_every_test_but_still_scores(tmp_path: Path) -> None:
    file = write_tests(tmp_path / "tests.jsonl", CASES[:3])
    runner = Path(cli_tests.__file__)
    done = subprocess.run(
        [sys.executable, str(runner), str(file), "--", "./not-there"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and parse_counts(done.stdout) == (0, 3)
    assert "could not run" in done.stdout and "not an executable here" in done.stdout


def test_k_selects_tests_by_id(tmp_path: Path) -> None:
    done = run(tmp_path, CASES, "-k", "exit-")
    assert set(parse_tests(done.stdout)) == {
        "tests.jsonl::exit-4", "tests.jsonl::exit-unexpected", "tests.jsonl::exit-unchecked"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[1]", "tests.jsonl:3: a test must be a JSON object"),
        ('{"args": []}', "field 'id' is required"),
        ('{"id": "a b", "args": []}', "no whitespace"),
        ('{"id": "a", "args": "x"}', "field 'args' must be list"),
        ('{"id": "a", "args": [], "exit_code": true}', "field 'exit_code' must be int or null"),
        ('{"id": "a", "args": [], "match": "fuzzy"}', "field 'match' must be one of"),
        ('{"id": "a", "args": [], "files": {"../x": ""}}', "files['../x']"),
        ('{"id": "a", "args": [], "timeout": 0}', "field 'timeout' must be a positive"),
        ('{"id": "a", "args": [], "stdn": ""}', "unknown field 'stdn'"),
        ("{not json", "tests.jsonl:3: not JSON"),
    ],
)
def test_a_bad_tests_file_is_refused_with_the_line_and_field(
    tmp_path: Path, line: str, message: str
) -> None:
    file = tmp_path / "tests.jsonl"
    file.write_text("# header\n\n" + line + "\n")
    done = subprocess.run(
        [sys.executable, cli_tests.__file__, str(file), "--", "true"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout
    assert message in done.stderr and parse_counts(done.stdout) is None


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    file = write_tests(tmp_path / "t.jsonl", [CASES[0], CASES[0]])
    with pytest.raises(cli_tests.BadTests, match="id 'echo' is used twice"):
        cli_tests.load_tests(file)


def test_json_streams_compare_as_values() -> None:
    values = cli_tests.json_stream(' 1 [2,3]\n{"a": null}  "x"')
    assert values == [1.0, [2.0, 3.0], {"a": None}, "x"]
    # jq's numbers are doubles: these two integers are the same double.
    assert cli_tests.json_stream("13911860366432393") == cli_tests.json_stream("13911860366432392")
    with pytest.raises(ValueError):
        cli_tests.json_stream("[1,")
