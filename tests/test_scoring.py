"""A score the code under test cannot forge: canaries, pytest isolation, pinned test counts, a
fresh copy in a fresh sandbox with no network (real git, real bwrap, real pytest)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from swarm.evaluation import evaluate
from swarm.evaluation.canary import Canaries, plant
from swarm.evaluation.cli import eval_command
from swarm.evaluation.isolation import read_results
from swarm.tasks import Task, apply_unit, load_task, load_units
from swarm.tasks.demo import make_demo_task
from tests.test_evaluation import bare_repo_with, git, push_all_units

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
pytestmark = needs_bwrap

# The forgery of the issue: the package's __init__.py rewrites every report of the hidden
# tests (found from sys.argv) into a pass.
FORGERY = """
import sys as _sys
import _pytest.reports as _reports

_hidden = [a for a in _sys.argv[1:] if not a.startswith("-")]
_real = _reports.TestReport.from_item_and_call.__func__


def _forged(cls, item, call):
    report = _real(cls, item, call)
    if any(str(item.path).startswith(h) for h in _hidden) or not _hidden:
        report.outcome, report.longrepr = "passed", None
    return report


_reports.TestReport.from_item_and_call = classmethod(_forged)
"""
# A conftest.py of the checkout that makes every test pass.
CONFTEST = """
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome, report.longrepr = "passed", None
"""


def plain_run_inside(clone: Path, task: Task) -> str:
    """pytest run on a copy of the hidden tests inside the checkout, with no isolation."""
    inside = clone / "tests_hidden"
    shutil.copytree(task.hidden_dir, inside)
    (inside / "pytest.ini").unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests_hidden"],
        cwd=clone, capture_output=True, text=True,
    )  # fmt: skip
    shutil.rmtree(inside)
    return done.stdout


def commit_files(clone: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        path = clone / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(clone, "add", "-A")
    git(clone, "commit", "-qm", message)
    git(clone, "push", "-q", "origin", "main")
    return git(clone, "rev-parse", "HEAD")


@pytest.fixture
def demo(tmp_path: Path) -> tuple[Task, Path, Path]:
    task = make_demo_task(tmp_path / "task")
    bare, clone = bare_repo_with(task.start_dir, tmp_path)
    return task, bare, clone


def test_the_forging_commit_is_tampered(demo: tuple[Task, Path, Path], tmp_path: Path) -> None:
    task, bare, clone = demo
    init = clone / "textkit" / "__init__.py"
    commit_files(clone, {"textkit/__init__.py": init.read_text() + FORGERY}, "forge")
    checkpoint = evaluate(task, bare, workdir=tmp_path / "ev")
    assert checkpoint.status == "tampered", checkpoint.reason
    assert checkpoint.reason is not None and "canary tests (tests that must fail) passed" in (
        checkpoint.reason
    )
    # Without canaries the same commit would have been 49/49: the forgery works on pytest.
    assert checkpoint.passed == 49
    # The canaries are not hidden tests: the checkpoint lists the 49 real ones only.
    assert len(checkpoint.tests) == 49


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"pytest.ini": "[pytest]\naddopts = -p conftest\n"},
        {"pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-p conftest'\n"},
        {"tox.ini": "[pytest]\naddopts = -p conftest\n"},
        {"setup.cfg": "[tool:pytest]\naddopts = -p conftest\n"},
        {"textkit/conftest.py": CONFTEST},
    ],
    ids=["conftest", "pytest.ini", "pyproject", "tox.ini", "setup.cfg", "package-conftest"],
)
def test_the_checkout_cannot_configure_pytest(
    demo: tuple[Task, Path, Path], tmp_path: Path, config: dict[str, str]
) -> None:
    task, bare, clone = demo
    commit_files(clone, {"conftest.py": CONFTEST, **config}, "pass everything")
    if "textkit/conftest.py" not in config:
        # These files are real pytest configuration: run from inside the checkout, the way
        # hidden tests are often run, they make all 49 tests pass.
        assert "49 passed" in plain_run_inside(clone, task)
    checkpoint = evaluate(task, bare, workdir=tmp_path / "ev")
    assert (checkpoint.status, checkpoint.passed, checkpoint.total) == ("scored", 0, 49)


def test_an_entry_point_plugin_of_the_checkout_is_not_loaded(
    demo: tuple[Task, Path, Path], tmp_path: Path
) -> None:
    task, bare, clone = demo
    files = {
        "passall.py": CONFTEST,
        "passall-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: passall\nVersion: 1.0\n",
        "passall-1.0.dist-info/entry_points.txt": "[pytest11]\npassall = passall\n",
    }
    commit_files(clone, files, "a plugin")
    plain = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(task.hidden_dir)],
        cwd=clone, capture_output=True, text=True,
    )  # fmt: skip
    assert "49 passed" in plain.stdout, plain.stdout[-500:]  # pytest would load it
    checkpoint = evaluate(task, bare, workdir=tmp_path / "ev")
    assert (checkpoint.status, checkpoint.passed) == ("scored", 0)


def test_the_hidden_tests_own_conftest_still_loads(tmp_path: Path) -> None:
    root = tmp_path / "task"
    (root / "start" / "pkg").mkdir(parents=True)
    (root / "start" / "pkg" / "__init__.py").write_text("def double(x):\n    return 2 * x\n")
    (root / "start" / "conftest.py").write_text("import pytest\n\n@pytest.fixture\n"
                                                "def base():\n    return 100\n")  # fmt: skip
    (root / "hidden" / "sub").mkdir(parents=True)
    (root / "hidden" / "conftest.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef base():\n    return 21\n"
    )
    (root / "hidden" / "sub" / "test_double.py").write_text(
        "import pkg\n\ndef test_double(base):\n    assert pkg.double(base) == 42\n"
    )
    (root / "goal.md").write_text("goal")
    (root / "task.toml").write_text("name = 't'\neval_command = 'python -m pytest -q {hidden}'\n")
    task = load_task(root)
    bare, _ = bare_repo_with(task.start_dir, tmp_path)
    checkpoint = evaluate(task, bare, workdir=tmp_path / "ev")
    assert (checkpoint.status, checkpoint.passed, checkpoint.total) == ("scored", 1, 1)
    assert list(checkpoint.tests) == ["sub/test_double.py::test_double"]


def pinned_task(tmp_path: Path, *, ids: bool) -> tuple[Task, Path, Path]:
    """Two hidden modules of 2 tests each, pinned at 4 by [check]."""
    root = tmp_path / "task"
    (root / "start" / "calc").mkdir(parents=True)
    (root / "start" / "calc" / "__init__.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "start" / "calc" / "more.py").write_text("ZERO = 0\n")
    (root / "hidden").mkdir()
    (root / "hidden" / "test_add.py").write_text(
        "from calc import add\n\ndef test_one():\n    assert add(1, 1) == 2\n\n"
        "def test_two():\n    assert add(2, 2) == 4\n"
    )
    (root / "hidden" / "test_sub.py").write_text(
        "from calc import add\nfrom calc.more import ZERO\n\n"
        "def test_three():\n    assert add(1, 2) == 3\n\n"
        "def test_four():\n    assert add(ZERO, 0) == 0\n"
    )
    (root / "goal.md").write_text("goal")
    toml = "name = 'calc'\neval_command = 'python -m pytest -q {hidden}'\n\n[check]\ntests = 4\n"
    if ids:
        (root / "check").mkdir()
        (root / "check" / "test-ids.txt").write_text(
            "test_add.py::test_one\ntest_add.py::test_two\n"
            "test_sub.py::test_three\ntest_sub.py::test_four\n"
        )
        toml += 'test_ids = "check/test-ids.txt"\n'
    (root / "task.toml").write_text(toml)
    task = load_task(root)
    bare, clone = bare_repo_with(task.start_dir, tmp_path)
    return task, bare, clone


@pytest.mark.parametrize("ids", [False, True], ids=["count", "ids"])
def test_a_collection_error_is_incomplete_not_a_smaller_denominator(
    tmp_path: Path, ids: bool
) -> None:
    task, bare, clone = pinned_task(tmp_path, ids=ids)
    good = evaluate(task, bare, workdir=tmp_path / "ev")
    assert (good.status, good.passed, good.total, good.reason) == ("scored", 4, 4, None)
    # The code under test drops a module one hidden test module imports: pytest collects the
    # other module only, and its summary would say "2 passed, 1 error".
    (clone / "calc" / "more.py").unlink()
    git(clone, "commit", "-qam", "drop calc.more")
    git(clone, "push", "-q", "origin", "main")
    checkpoint = evaluate(task, bare, workdir=tmp_path / "ev")
    assert checkpoint.status == "incomplete"
    assert checkpoint.reason is not None and "did not collect" in checkpoint.reason
    assert checkpoint.total == 4  # the pinned count, never the 2 that were collected


def test_fewer_tests_than_pinned_is_incomplete(tmp_path: Path) -> None:
    task, bare, _ = pinned_task(tmp_path, ids=True)
    # The hidden tests lost one test (no collection error): only the pin notices.
    (task.hidden_dir / "test_sub.py").write_text(
        "from calc import add\n\ndef test_three():\n    assert add(1, 2) == 3\n"
    )
    checkpoint = evaluate(task, bare, workdir=tmp_path / "ev")
    assert checkpoint.status == "incomplete" and checkpoint.reason is not None
    assert "3 of the 4 hidden tests pinned" in checkpoint.reason
    assert "test_sub.py::test_four" in checkpoint.reason
    assert (checkpoint.passed, checkpoint.total) == (3, 4)


def test_each_scoring_gets_a_fresh_copy_and_read_only_hidden_tests(tmp_path: Path) -> None:
    task, bare, clone = pinned_task(tmp_path, ids=False)
    probe = (
        "import pathlib\n"
        "def probe(hidden):\n"
        "    here = pathlib.Path.cwd()\n"
        "    assert not (here / 'left-behind').exists()\n"
        "    (here / 'left-behind').write_text('x')\n"
        "    try:\n"
        "        open(hidden / 'test_add.py', 'a').write('x')\n"
        "    except OSError:\n"
        "        pass\n"
        "    else:\n"
        "        raise AssertionError('the hidden tests are writable')\n"
    )
    commit_files(clone, {"tests_probe.py": probe}, "probe")
    (task.hidden_dir / "test_probe.py").write_text(
        "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path.cwd()))\n"
        "from tests_probe import probe\n\n"
        "def test_probe():\n    probe(pathlib.Path(__file__).parent)\n"
    )
    (task.root / "task.toml").write_text(
        (task.root / "task.toml").read_text().replace("tests = 4", "tests = 5")
    )
    task = load_task(task.root)
    for _ in range(2):  # the second scoring does not see what the first one wrote
        checkpoint = evaluate(task, bare, workdir=tmp_path / "ev")
        assert (checkpoint.status, checkpoint.passed, checkpoint.total) == ("scored", 5, 5), (
            checkpoint.output_tail[-800:]
        )
    assert not list((tmp_path / "ev").glob("scoring-*"))  # nothing of a scoring is kept


def test_the_scoring_has_no_network(tmp_path: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted: list[bool] = []

    def accept() -> None:
        server.settimeout(30)
        try:
            server.accept()
            accepted.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    root = tmp_path / "task"
    (root / "start").mkdir(parents=True)
    (root / "start" / "README").write_text("x\n")
    (root / "hidden").mkdir()
    (root / "goal.md").write_text("goal")
    command = (
        f"python -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 5)\" "
        "&& echo '1 passed' || echo '1 failed'"
    )
    (root / "task.toml").write_text(f"name = 't'\neval_command = '''{command}'''\n")
    task = load_task(root)
    bare, _ = bare_repo_with(task.start_dir, tmp_path)
    checkpoint = evaluate(task, bare, workdir=tmp_path / "ev")
    server.close()
    thread.join(timeout=30)
    assert (checkpoint.passed, checkpoint.total) == (0, 1), checkpoint.output_tail
    assert not accepted
    # Asked for by name, the unconfined sandbox reaches the host's loopback.
    server = socket.create_server(("127.0.0.1", port))
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    unconfined = evaluate(task, bare, workdir=tmp_path / "ev", sandbox="none")
    server.close()
    thread.join(timeout=30)
    assert (unconfined.passed, unconfined.total) == (1, 1) and accepted


def test_canaries_are_new_each_scoring_and_look_like_the_hidden_tests(tmp_path: Path) -> None:
    seen: list[list[str]] = []
    for n in range(2):
        task = make_demo_task(tmp_path / f"t{n}")
        canaries = plant(task.hidden_dir, task.render_eval_command(), pytest=True)
        assert len(canaries.ids) == 3
        source = (task.hidden_dir / "test_textkit.py").read_text()
        real = ("test_case", "test_truncate_rejects_a_width_below_the_suffix")
        for canary in canaries.ids:
            module, name = canary.split("::")
            assert module == "test_textkit.py" and name.startswith(real) and name not in real
            assert f"def {name}(" in source  # in the module of the real tests
        seen.append(canaries.ids)
    assert seen[0] != seen[1]


def test_reading_the_plugins_results() -> None:
    lines = [
        '{"id": "t.py::a", "when": "setup", "outcome": "passed"}',
        '{"id": "t.py::a", "when": "call", "outcome": "passed"}',
        '{"id": "t.py::a", "when": "teardown", "outcome": "passed"}',
        '{"id": "t.py::b", "when": "call", "outcome": "failed"}',
        '{"id": "t.py::c", "when": "call", "outcome": "passed"}',
        '{"id": "t.py::c", "when": "teardown", "outcome": "failed"}',
        '{"id": "t.py::d", "when": "setup", "outcome": "skipped"}',
        '{"id": "t.py::d", "when": "teardown", "outcome": "passed"}',
        '{"id": "t.py::e", "when": "call", "outcome": "skipped", "xfail": true}',
        '{"id": "u.py", "when": "collect", "outcome": "failed"}',
        '{"id": "t.py::f", "when": "setup", "outcome": "passed"}',
        '{"id": "t.py::g", "when": "call", "outc',
    ]
    assert read_results(lines) == {
        "t.py::a": "passed",
        "t.py::b": "failed",
        "t.py::c": "error",
        "t.py::d": "skipped",
        "t.py::e": "skipped",
        "u.py": "error",
        "t.py::f": "error",
    }
    canaries = Canaries(["t.py::b", "t.py::z", "u.py::y"])
    assert canaries.reported({"t.py::b[1]": "failed", "u.py": "error"}) == {
        "passed": [],
        "missing": ["t.py::z"],
        "failed": ["t.py::b", "u.py::y"],
    }


def test_an_honest_commit_scores_as_before(demo: tuple[Task, Path, Path], tmp_path: Path) -> None:
    task, bare, clone = demo
    push_all_units(task, clone)
    checkpoint = evaluate(task, bare, workdir=tmp_path / "ev")
    assert (checkpoint.status, checkpoint.passed, checkpoint.total) == ("scored", 49, 49)


def test_eval_scores_a_plain_folder_and_relative_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = make_demo_task(tmp_path / "task")
    (tmp_path / "here").mkdir()
    folder = tmp_path / "here" / "code"
    shutil.copytree(task.start_dir, folder)
    for unit in load_units(task)[:6]:
        apply_unit(unit, folder)
    _, clone = bare_repo_with(task.start_dir, tmp_path)
    monkeypatch.chdir(tmp_path / "here")
    runner = CliRunner()
    args = ["../task", "--repo", "code", "--workdir", "ev", "--json"]
    first = runner.invoke(eval_command, args)
    assert first.exit_code == 0, first.output
    scored = json.loads(first.output.splitlines()[-1])
    assert (scored["status"], scored["total"]) == ("scored", 49)
    assert 0 < scored["passed"] < 49 and scored["commit"].startswith("folder-")
    again = json.loads(runner.invoke(eval_command, args).output.splitlines()[-1])
    assert again["commit"] == scored["commit"]  # the same files: the same "commit"
    (folder / "NOTES.md").write_text("more\n")
    changed = json.loads(runner.invoke(eval_command, args).output.splitlines()[-1])
    assert changed["commit"] != scored["commit"] and changed["passed"] == scored["passed"]
    # A relative path to a git repository, and to the workdir, work the same way.
    push_all_units(task, clone)
    relative = runner.invoke(
        eval_command, ["../task", "--repo", "../shared.git", "--workdir", "ev2"]
    )
    assert relative.exit_code == 0 and "49/49 passed" in relative.output, relative.output
    wrong = runner.invoke(eval_command, ["../task", "--repo", "code", "--commit", "abc123"])
    assert wrong.exit_code == 1 and "is a plain folder, not a git repository" in wrong.output
    missing = runner.invoke(eval_command, ["../task", "--repo", "nowhere"])
    assert missing.exit_code == 1 and "nowhere does not exist" in missing.output


def test_eval_cli_says_tampered_and_exits_2(demo: tuple[Task, Path, Path], tmp_path: Path) -> None:
    task, bare, clone = demo
    init = clone / "textkit" / "__init__.py"
    commit_files(clone, {"textkit/__init__.py": init.read_text() + FORGERY}, "forge")
    result = CliRunner().invoke(
        eval_command, [str(task.root), "--repo", str(bare), "--workdir", str(tmp_path / "ev")]
    )
    assert result.exit_code == 2
    assert "tampered, not a pass rate: 3 of 3 canary tests" in result.output


HONEST_RENDERER = """
import sys
text = sys.stdin.read()
for block in [b.strip() for b in text.split("\\n\\n") if b.strip()]:
    print(f"<p>{block}</p>")
"""
# Looks its answers up in the examples file, found from the runner's command line.
LOOKUP_RENDERER = """
import json, os, sys
argv = open(f"/proc/{os.getppid()}/cmdline").read().split("\\0")
examples = json.load(open(next(a for a in argv if a.endswith(".json"))))
text = sys.stdin.read()
sys.stdout.write(next(e["html"] for e in examples if e["markdown"] == text))
"""


def spec_task(tmp_path: Path, renderer: str, runner: str | None = None) -> tuple[Task, Path]:
    root = tmp_path / "task"
    (root / "start" / "impl").mkdir(parents=True)
    (root / "start" / "impl" / "__main__.py").write_text(renderer)
    (root / "hidden").mkdir()
    examples = [
        {"markdown": f"word{n}\n\nmore {n}\n", "html": f"<p>word{n}</p>\n<p>more {n}</p>\n",
         "example": n, "section": "Paragraphs"}
        for n in range(1, 9)
    ]  # fmt: skip
    (root / "hidden" / "examples.json").write_text(json.dumps(examples))
    spec_runner = Path(__file__).parent.parent / "swarm" / "evaluation" / "spec_runner.py"
    (root / "hidden" / "run_spec.py").write_text(runner or spec_runner.read_text())
    (root / "goal.md").write_text("goal")
    command = "python {hidden}/run_spec.py {hidden}/examples.json -- python -m impl"
    (root / "task.toml").write_text(f"name = 'spec'\neval_command = '{command}'\n")
    task = load_task(root)
    bare, _ = bare_repo_with(task.start_dir, tmp_path)
    return task, bare


def test_spec_runner_canaries_catch_an_implementation_that_looks_answers_up(
    tmp_path: Path,
) -> None:
    task, bare = spec_task(tmp_path / "honest", HONEST_RENDERER)
    honest = evaluate(task, bare, workdir=tmp_path / "ev1")
    assert (honest.status, honest.passed, honest.total) == ("scored", 8, 8), honest.output_tail
    assert sorted(honest.tests) == sorted(f"examples.json::example-{n}" for n in range(1, 9))
    task, bare = spec_task(tmp_path / "lookup", LOOKUP_RENDERER)
    forged = evaluate(task, bare, workdir=tmp_path / "ev2")
    assert forged.status == "tampered", forged.output_tail
    assert forged.reason is not None and "3 of 3 canary tests" in forged.reason


def test_a_runner_without_per_example_lines_cannot_be_checked(tmp_path: Path) -> None:
    # A runner that prints only its summary (as the one of an older prepared task did).
    quiet = (
        "import json, subprocess, sys\n"
        "examples = json.load(open(sys.argv[1]))\n"
        "command = sys.argv[3:]\n"
        "ok = sum(subprocess.run(command, input=e['markdown'].encode(), capture_output=True)"
        ".stdout.decode() == e['html'] for e in examples)\n"
        "print(f'{ok} passed, {len(examples) - ok} failed')\n"
    )
    task, bare = spec_task(tmp_path, HONEST_RENDERER, runner=quiet)
    checkpoint = evaluate(task, bare, workdir=tmp_path / "ev")
    assert checkpoint.status == "incomplete" and checkpoint.reason is not None
    assert "canary tests did not run" in checkpoint.reason
    assert (checkpoint.passed, checkpoint.total) == (8, 8)  # the canaries taken out of the count
