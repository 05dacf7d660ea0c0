"""The evaluator: score parsing, HTML normalisation, and scoring real git repositories."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from swarm.errors import NotFound
from swarm.evaluation import Checkpoint, Evaluator, evaluate, parse_counts
from swarm.evaluation.cli import eval_command
from swarm.evaluation.parse import parse_tests
from swarm.evaluation.spec_runner import normalize_html
from swarm.tasks import Task, apply_unit, load_task, load_units
from swarm.tasks.demo import make_demo_task

GIT = [
    "git",
    "-c",
    "user.name=t",
    "-c",
    "user.email=t@example.com",
    "-c",
    "init.defaultBranch=main",
]


@pytest.mark.parametrize(
    ("output", "counts"),
    [
        ("3 failed, 452 passed in 1.2s", (452, 455)),
        ("455 passed", (455, 455)),
        ("....\n455 passed in 0.26s\n", (455, 455)),
        ("==== 1 failed, 2 passed, 1 error, 3 skipped in 0.3s ====", (2, 4)),
        ("ERROR x\nInterrupted: 1 error during collection\n1 error in 0.12s", (0, 1)),
        ("2 errors in 0.1s", (0, 2)),
        ("no tests ran in 0.01s", (0, 0)),
        ("FAILED 3 in section Links\n610 passed, 42 failed\n", (610, 652)),
        ("1 passed, 1 warning, 1 xpassed in 0.1s", (2, 2)),
        ("Traceback (most recent call last):\nboom", None),
        ("", None),
    ],
)
def test_parse_counts(output: str, counts: tuple[int, int] | None) -> None:
    assert parse_counts(output) == counts


def test_parse_tests_reads_pytests_short_summary() -> None:
    output = (
        "=== short test summary info ===\n"
        "PASSED t.py::test_a\n"
        "PASSED t.py::test_b[x - y]\n"
        "FAILED t.py::test_c - AssertionError: 1 - 2\n"
        "ERROR t.py::test_c - RuntimeError: teardown\n"
        "ERROR t.py - ImportError\n"
        "SKIPPED [1] t.py:9: no network\n"
        "XFAIL t.py::test_d - known\n"
        "2 passed, 1 failed, 1 error, 1 skipped, 1 xfailed in 0.1s\n"
    )
    assert parse_tests(output) == {
        "t.py::test_a": "passed",
        "t.py::test_b[x - y]": "passed",
        "t.py::test_c": "error",
        "t.py::test_d": "skipped",
    }
    assert parse_tests("455 passed in 0.3s") == {}


def test_parse_counts_reads_the_last_summary() -> None:
    assert parse_counts("5 passed\nlog: 9 failed earlier?\n1 failed, 1 passed in 2s") == (1, 2)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("<p>x</p>\n<ul>\n<li>a</li>\n</ul>\n", "<p>x</p><ul><li>a</li></ul>"),
        ('<a title="t" href="u">x</a>', "<a href='u' title='t'>x</a>"),
        ("<p>a &amp; b &quot;</p>", '<p>a &#38; b "</p>'),
        ("<p>a  \n b</p>", "<p>a b</p>"),
    ],
)
def test_normalize_html_ignores_insignificant_differences(a: str, b: str) -> None:
    assert normalize_html(a) == normalize_html(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [("<pre><code>a  b</code></pre>", "<pre><code>a b</code></pre>"), ("<em>a</em>", "<b>a</b>")],
)
def test_normalize_html_keeps_significant_differences(a: str, b: str) -> None:
    assert normalize_html(a) != normalize_html(b)


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True)
    return result.stdout.strip()


def bare_repo_with(start: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A bare repository whose main holds `start`, and a clone to push more commits from."""
    bare, clone = tmp_path / "shared.git", tmp_path / "clone"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    shutil.copytree(start, clone)
    git(clone, "init", "-q")
    git(clone, "add", "-A")
    git(clone, "commit", "-qm", "start")
    git(clone, "remote", "add", "origin", str(bare))
    git(clone, "push", "-q", "origin", "main")
    return bare, clone


def push_all_units(task: Task, clone: Path) -> str:
    for u in load_units(task):
        apply_unit(u, clone)
    git(clone, "commit", "-qam", "all units")
    git(clone, "push", "-q", "origin", "main")
    return git(clone, "rev-parse", "HEAD")


def test_evaluate_scores_main_of_a_bare_repo(tmp_path: Path) -> None:
    task = make_demo_task(tmp_path / "task")
    bare, clone = bare_repo_with(task.start_dir, tmp_path)
    first_sha = git(clone, "rev-parse", "HEAD")
    workdir = tmp_path / "evaluator"
    before = evaluate(task, bare, "main", workdir)
    assert (before.passed, before.total, before.reason) == (0, 49, None)
    # pytest's own summary counts the scoring's 3 canaries too; the checkpoint does not.
    assert before.commit == first_sha and "52 failed" in before.output_tail
    # Each hidden test's outcome is kept, by pytest's node id.
    assert len(before.tests) == 49 and set(before.tests.values()) == {"failed"}
    assert all("::test_" in test for test in before.tests)
    sha = push_all_units(task, clone)
    after = evaluate(task, bare, "main", workdir)
    assert (after.passed, after.total, after.commit) == (49, 49, sha) and after.rate == 1.0
    assert after.tests.keys() == before.tests.keys() and set(after.tests.values()) == {"passed"}
    again = evaluate(task, str(bare), first_sha[:10], workdir)
    assert (again.passed, again.commit) == (0, first_sha)
    # The evaluator fetches into a bare mirror of its own; each scoring copies the commit
    # out of it afresh, so nothing written into the mirror's folder reaches a scoring.
    assert (workdir / "mirror.git" / "HEAD").is_file() and not (workdir / "checkout").exists()
    assert evaluate(task, bare, "main", workdir).passed == 49
    with pytest.raises(NotFound, match="'nope' is not in"):
        evaluate(task, bare, "nope", workdir)


def command_task(tmp_path: Path, command: str, timeout: float = 60) -> Task:
    root = tmp_path / "task"
    for part in ("start", "hidden"):
        (root / part).mkdir(parents=True)
    (root / "start" / "README").write_text("x\n")
    (root / "goal.md").write_text("goal")
    toml = f"name = 't'\neval_command = '''{command}'''\neval_timeout = {timeout}\n"
    (root / "task.toml").write_text(toml)
    return load_task(root)


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_evaluate_kills_the_process_group_on_timeout(tmp_path: Path, sandbox: str) -> None:
    if sandbox == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap")
    marker = f"61.{uuid.uuid4().int % 10**9:09d}"  # a sleep only this test starts
    task = command_task(tmp_path, f"sleep {marker} & echo started; wait", 1)
    bare, _ = bare_repo_with(task.start_dir, tmp_path)
    started = time.monotonic()
    checkpoint = evaluate(task, bare, workdir=tmp_path / "ev", sandbox=sandbox)
    assert time.monotonic() - started < 20
    assert checkpoint.reason is not None and "timed out after 1s" in checkpoint.reason
    assert (checkpoint.passed, checkpoint.total) == (0, 0) and "started" in checkpoint.output_tail
    assert checkpoint.status == "error"

    def alive() -> list[str]:  # the sleep, unless it exited or is a zombie waiting for init
        found = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                state = (proc / "status").read_text()
            except OSError:
                continue
            if marker.encode() in cmdline and "State:\tZ" not in state:
                found.append(proc.name)
        return found

    deadline = time.monotonic() + 10  # SIGKILL is delivered asynchronously
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive()


def test_evaluate_reports_a_crash_and_uses_a_clean_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARM_SECRET_MARKER", "leaked")
    task = command_task(tmp_path, "env; ls; echo boom >&2; exit 3")
    bare, _ = bare_repo_with(task.start_dir, tmp_path)
    checkpoint = evaluate(task, bare, workdir=tmp_path / "ev")
    assert checkpoint.reason == "no test summary in the output (exit code 3); the run crashed"
    assert "boom" in checkpoint.output_tail and "README" in checkpoint.output_tail
    assert "leaked" not in checkpoint.output_tail and "PYTHONHASHSEED=0" in checkpoint.output_tail


def test_evaluator_records_on_schedule_and_at_the_end(tmp_path: Path) -> None:
    task = make_demo_task(tmp_path / "task")
    bare, clone = bare_repo_with(task.start_dir, tmp_path)
    seen: list[Checkpoint] = []
    evaluator = Evaluator(task, bare, seen.append, workdir=tmp_path / "ev", interval=0.2)
    evaluator.start()
    deadline = time.monotonic() + 60
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen[0].passed == 0 and seen[1].duration == 0.0  # unchanged main is not rerun
    assert seen[1].commit == seen[0].commit and seen[1].time > seen[0].time
    sha = push_all_units(task, clone)
    final = evaluator.stop()
    assert final is not None and final is seen[-1]
    assert (final.commit, final.passed, final.total) == (sha, 49, 49)
    count = len(seen)
    time.sleep(0.5)
    assert len(seen) == count  # stopped means stopped


def test_evaluator_turns_a_missing_main_into_a_checkpoint(tmp_path: Path) -> None:
    task = make_demo_task(tmp_path / "task")
    bare = tmp_path / "empty.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    boom: list[Checkpoint] = []

    def failing_sink(checkpoint: Checkpoint) -> None:
        boom.append(checkpoint)
        raise RuntimeError("sink down")

    checkpoint = Evaluator(task, bare, failing_sink, workdir=tmp_path / "ev").run_once()
    assert (
        checkpoint.passed == 0 and checkpoint.reason is not None and "'main'" in checkpoint.reason
    )
    assert boom == [checkpoint]


def test_eval_cli_prints_the_checkpoint(tmp_path: Path) -> None:
    task = make_demo_task(tmp_path / "task")
    bare, clone = bare_repo_with(task.start_dir, tmp_path)
    push_all_units(task, clone)
    runner = CliRunner()
    args = [str(task.root), "--repo", str(bare), "--workdir", str(tmp_path / "ev")]
    result = runner.invoke(eval_command, args)
    assert result.exit_code == 0, result.output
    assert "49/49 passed (100.0%)" in result.output
    as_json = json.loads(runner.invoke(eval_command, [*args, "--json"]).output)
    assert as_json["passed"] == 49 and as_json["reason"] is None
    missing = runner.invoke(eval_command, [*args, "--commit", "nope"])
    assert missing.exit_code == 1 and missing.output.startswith("Error: commit or branch 'nope'")


def test_evaluator_follows_main_one_scoring_at_a_time_of_the_newest_main(tmp_path: Path) -> None:
    started = tmp_path / "started"
    task = command_task(tmp_path, f"echo x >> {started}; sleep 1; echo '1 passed'")
    bare, clone = bare_repo_with(task.start_dir, tmp_path)

    def push(text: str) -> str:
        (clone / "README").write_text(text)
        git(clone, "commit", "-qam", text)
        git(clone, "push", "-q", "origin", "main")
        return git(clone, "rev-parse", "HEAD")

    def scorings() -> int:
        return len(started.read_text().splitlines()) if started.exists() else 0

    def wait_for(condition: object) -> None:
        assert callable(condition)
        deadline = time.monotonic() + 30
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert condition()

    seen: list[Checkpoint] = []
    first = git(clone, "rev-parse", "HEAD")
    # Unconfined (asked for by name): the scorings count themselves in a file of the host.
    evaluator = Evaluator(task, bare, seen.append, workdir=tmp_path / "ev", interval=600,
                          follow=0.05, sandbox="none")  # fmt: skip
    evaluator.start()
    try:
        wait_for(lambda: scorings() == 1)  # main as it starts is scored at once
        push("a")
        newest = push("b")  # both land while the first scoring runs
        wait_for(lambda: len(seen) == 2)
        time.sleep(0.5)
        assert scorings() == 2  # main did not move again: nothing more to score
        third = push("c")
        wait_for(lambda: len(seen) == 3)
    finally:
        final = evaluator.stop()
    # a and b were scored together, as b; each merge after that got its own scoring.
    assert [c.commit for c in seen[:3]] == [first, newest, third]
    assert scorings() == 3 and final is not None and final.commit == third
    for earlier, later in itertools.pairwise(seen[:3]):
        assert earlier.time + earlier.duration <= later.time  # never two at once
