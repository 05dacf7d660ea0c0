"""Task loading, budgets, solution units, and the demo and scale tasks (real files, real git)."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from swarm.errors import InvalidInput, NotFound
from swarm.tasks import (
    Edit,
    TaskNotPrepared,
    Unit,
    UnitAlreadyApplied,
    UnitDoesNotApply,
    apply_unit,
    load_task,
    load_units,
    parse_budget,
    prepare_task,
)
from swarm.tasks.cli import task_group
from swarm.tasks.demo import make_demo_task, make_scale_task
from swarm.tasks.units import check_independent, parse_units

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "tasks"
GIT = [
    "git",
    "-c",
    "user.name=t",
    "-c",
    "user.email=t@example.com",
    "-c",
    "init.defaultBranch=main",
]


def run_hidden(task_cmd: str, cwd: Path) -> str:
    """Run an eval command the way the evaluator does (this interpreter first on PATH)."""
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(cwd)}
    result = subprocess.run(task_cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True)
    return result.stdout.strip().splitlines()[-1]


def write_task(root: Path, toml: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "task.toml").write_text(toml)
    return root


BASE = 'name = "t"\neval_command = "true"\n'


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("6h", 21600), ("1h30m", 5400), (" 2M ", 120), (45, 45)],
)
def test_parse_budget(text: str | int, seconds: int) -> None:
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "10", "1d", "0m", "m", "30 m", -5])
def test_parse_budget_refuses_nonsense(text: str | int) -> None:
    with pytest.raises(InvalidInput, match="budget"):
        parse_budget(text)


def test_load_task_reads_every_field(tmp_path: Path) -> None:
    for part in ("start", "tests", "sol"):
        (tmp_path / part).mkdir()
    (tmp_path / "goal.md").write_text("do it")
    (tmp_path / "sol" / "u.json").write_text("[]")
    toml = (
        BASE + 'hidden_tests = "tests"\nbudget = "1h30m"\neval_timeout = 9\nsolution = "sol/u.json"'
    )
    task = load_task(write_task(tmp_path, toml))
    assert task.hidden_dir == tmp_path / "tests" and task.budget_seconds == 5400
    assert task.eval_timeout == 9 and task.is_prepared and task.goal_text() == "do it"
    assert load_units(task) == []


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('eval_command = "x"', "'name' is required"),
        ('name = "t"', "'eval_command' is required"),
        (BASE + "colour = 1", "'colour' is not a task field"),
        (BASE + 'start = "/etc"', "'start' must be a path relative"),
        (BASE + 'start = "../x"', "'start' points outside"),
        (BASE + 'hidden_tests = "start/t"', "'hidden_tests' is inside `start`"),
        (BASE + 'budget = "soon"', "'budget'.*not a duration"),
        (BASE + "eval_timeout = -1", "'eval_timeout' must be a positive"),
        ('name = "t"\neval_command = "pytest {hiden}"', "unknown placeholder"),
        ("name = [", "not valid TOML"),
    ],
)
def test_load_task_errors_name_the_field(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as info:
        load_task(write_task(tmp_path, toml))
    assert "task.toml" in info.value.message


def test_load_task_missing(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match=r"task\.toml does not exist"):
        load_task(tmp_path)
    with pytest.raises(NotFound, match=r"goal\.md does not exist"):
        load_task(write_task(tmp_path, BASE))


def test_unprepared_task_says_how_to_prepare(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path, BASE + 'prepare = "demo"'))
    assert not task.is_prepared
    with pytest.raises(TaskNotPrepared, match=r"run `swarm task prepare .*` first"):
        task.goal_text()


def unit(uid: str, old: str, new: str, path: str = "f.txt") -> Unit:
    return Unit(uid, uid, (path,), (Edit(path, old, new),))


def test_apply_unit_and_already_applied(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("a\nSTUB\nb\n")
    assert apply_unit(unit("u", "STUB\n", "done\n"), tmp_path) == ["f.txt"]
    assert (tmp_path / "f.txt").read_text() == "a\ndone\nb\n"
    with pytest.raises(UnitAlreadyApplied, match="unit u is already applied"):
        apply_unit(unit("u", "STUB\n", "done\n"), tmp_path)
    with pytest.raises(
        UnitDoesNotApply, match=r"unit v: the text to replace in f.txt is not found"
    ):
        apply_unit(unit("v", "GONE", "x"), tmp_path)
    (tmp_path / "f.txt").write_text("X X")
    with pytest.raises(UnitDoesNotApply, match="found 2 times"):
        apply_unit(unit("w", "X", "Y"), tmp_path)
    with pytest.raises(NotFound, match=r"unit z: nope\.txt does not exist"):
        apply_unit(unit("z", "X", "Y", "nope.txt"), tmp_path)


def test_parse_units_errors() -> None:
    assert parse_units('[{"id": "a", "edits": [{"path": "p", "old": "o", "new": "n"}]}]')[0].scope
    for bad, message in [
        ("{", "not valid JSON"),
        ("{}", "must hold a list"),
        ('[{"id": "a", "edits": []}]', "non-empty 'edits'"),
        ('[{"id": "a", "edits": [{"path": "p"}]}]', "path, old and new"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            parse_units(bad)


def test_check_independent_refuses_close_edits(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("A\n1\n2\nB\n")
    with pytest.raises(InvalidInput, match="less than 3 lines apart"):
        check_independent([unit("a", "A\n", "a\n"), unit("b", "B\n", "b\n")], tmp_path)


def test_demo_task_start_fails_and_units_pass_in_any_order(tmp_path: Path) -> None:
    task = make_demo_task(tmp_path / "task")
    units = load_units(task)
    assert len(units) == 12
    check_independent(units, task.start_dir)
    command = task.render_eval_command()
    work = tmp_path / "work"
    shutil.copytree(task.start_dir, work)
    assert run_hidden(command, work).startswith("49 failed")
    for half in (units[::2], units[1::2]):
        for u in reversed(half):
            apply_unit(u, work)
    assert run_hidden(command, work).startswith("49 passed")
    goal = task.goal_text()
    assert all(f"textkit.{u.id}" in goal for u in units) and "assert" not in goal


def git(cwd: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def merge_every_unit_on_its_own_branch(start: Path, units: list[Unit], work: Path) -> None:
    """Each unit is a separate branch off the start; merging them all into main never conflicts."""
    shutil.copytree(start, work)
    git(work, "init", "-q")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "start")
    for u in units:
        git(work, "checkout", "-q", "-b", u.id, "main")
        apply_unit(u, work)
        git(work, "commit", "-qam", u.id)
    git(work, "checkout", "-q", "main")
    for u in units:
        git(work, "merge", "-q", "--no-edit", u.id)


def test_demo_units_merge_without_conflicts(tmp_path: Path) -> None:
    task = make_demo_task(tmp_path / "task")
    merge_every_unit_on_its_own_branch(task.start_dir, load_units(task), tmp_path / "repo")
    assert run_hidden(task.render_eval_command(), tmp_path / "repo").startswith("49 passed")


def test_scale_task(tmp_path: Path) -> None:
    task = make_scale_task(tmp_path / "task", units=12)
    units = load_units(task)
    assert [u.id for u in units][:2] == ["u0001", "u0002"] and task.name == "scale-12"
    work = tmp_path / "work"
    shutil.copytree(task.start_dir, work)
    assert run_hidden(task.render_eval_command(), work).startswith("12 failed")
    for u in itertools.islice(units, 5):
        apply_unit(u, work)
    assert run_hidden(task.render_eval_command(), work).startswith("7 failed, 5 passed")
    with pytest.raises(InvalidInput, match="1 to"):
        make_scale_task(tmp_path / "zero", units=0)


def test_prepare_example_demo_in_a_copy(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    root.mkdir()
    shutil.copy(EXAMPLES / "demo" / "task.toml", root)
    lines: list[str] = []
    task = prepare_task(root, say=lines.append)
    assert task.is_prepared and "wrote the textkit demo" in lines[0]
    assert "/start" in (root / ".gitignore").read_text()
    prepare_task(root, say=lines.append)
    assert "already prepared" in lines[-1]


def test_task_cli_prepare_and_show(tmp_path: Path) -> None:
    root = tmp_path / "scale"
    write_task(root, (EXAMPLES / "scale" / "task.toml").read_text().replace("1024", "3"))
    runner = CliRunner()
    shown = runner.invoke(task_group, ["show", str(root)])
    assert shown.exit_code == 0 and "prepared: no" in shown.output
    prepared = runner.invoke(task_group, ["prepare", str(root)])
    assert prepared.exit_code == 0, prepared.output
    assert "solution:" in prepared.output and "(3 units)" in prepared.output
    shown = runner.invoke(task_group, ["show", str(root)])
    assert "prepared: yes" in shown.output and "units:    3" in shown.output
    missing = runner.invoke(task_group, ["show", str(tmp_path / "nowhere")])
    assert missing.exit_code == 1 and "Traceback" not in missing.output
    assert missing.output.count("\n") == 1 and "does not exist" in missing.output


def test_load_task_reads_environment_and_check(tmp_path: Path) -> None:
    for part in ("start", "hidden", "check"):
        (tmp_path / part).mkdir()
    (tmp_path / "goal.md").write_text("do it")
    (tmp_path / "check" / "test-ids.txt").write_text("# pinned\nt.py::a\n\nt.py::b\n")
    toml = BASE + (
        '\n[environment]\npython = "3.11"\ndependencies = ["attrs>=23.1", "six"]\n'
        'image = "swarm:local"\n'
        '\n[check]\ntests = 2\ntest_ids = "check/test-ids.txt"\nstart_passed = 0\n'
        "reference_passed = 2\nchecked_at = 2026-12-01T15:00:00Z\n"
    )
    task = load_task(write_task(tmp_path, toml))
    assert task.environment.python == "3.11" and not task.environment.is_default
    assert task.environment.dependencies == ("attrs>=23.1", "six")
    assert task.environment.image == "swarm:local"
    assert task.check is not None and task.check.tests == 2
    assert task.check.test_ids == tmp_path / "check" / "test-ids.txt"
    assert task.check.pinned_ids() == ["t.py::a", "t.py::b"]
    assert (task.check.start_passed, task.check.reference_passed) == (0, 2)
    assert task.check.checked_at is not None and task.check.checked_at.startswith("2026-12-01")
    for part in ("plain/start", "plain/hidden"):
        (tmp_path / part).mkdir(parents=True)
    (tmp_path / "plain" / "goal.md").write_text("g")
    plain = load_task(write_task(tmp_path / "plain", BASE.replace("true", "pytest -q")))
    assert plain.environment.is_default and plain.check is None and plain.uses_pytest


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        ("[environment]\npython = 3.11", "'environment.python' must be a version"),
        ('[environment]\npython = "python3"', "'environment.python' must be a version"),
        ('[environment]\ndependencies = "attrs"', "'environment.dependencies' must be a list"),
        ('[environment]\ndependencies = ["--index-url=x"]', "pip options are not allowed"),
        ('[environment]\nimage = "Bad Image"', "'environment.image' must be an image name"),
        ('[environment]\nnode = "20"', "'environment.node' is not a field of [environment]"),
        ("environment = 3", "'environment' must be a table"),
        ("[check]\ntests = -1", "'check.tests' must be a whole number"),
        ('[check]\ntests = "455"', "'check.tests' must be a whole number"),
        ("[check]\ntests = 4\nreference_passed = 5", "'check.reference_passed' is 5, more than"),
        ('[check]\ntest_ids = "nope.txt"', "'check.test_ids' names 'nope.txt', which does not"),
        ('[check]\ntest_ids = "../x.txt"', "'check.test_ids' points outside"),
        ("[check]\ntests = 3\ntest_ids = 'ids.txt'", "lists 2 test ids, but check.tests is 3"),
        ("[check]\ncount = 3", "'check.count' is not a field of [check]"),
    ],
)
def test_task_tables_errors_name_the_field(tmp_path: Path, tables: str, message: str) -> None:
    for part in ("start", "hidden"):
        (tmp_path / part).mkdir()
    (tmp_path / "goal.md").write_text("g")
    (tmp_path / "ids.txt").write_text("a::b\na::c\n")
    with pytest.raises(InvalidInput, match=re.escape(message)):
        load_task(write_task(tmp_path, BASE + "\n" + tables + "\n"))


def test_the_published_task_carries_its_environment(tmp_path: Path) -> None:
    import pytest as installed

    from swarm.tasks.published import publish_task, read_published
    from swarm.worker.cli import published_environment

    for part in ("start", "hidden"):
        (tmp_path / "t" / part).mkdir(parents=True)
    (tmp_path / "t" / "goal.md").write_text("g")
    toml = (
        'name = "t"\neval_command = "python -m pytest {hidden}"\n'
        '[environment]\npython = "3.11"\ndependencies = ["attrs>=23.1"]\nimage = "swarm:local"\n'
    )
    task = load_task(write_task(tmp_path / "t", toml))
    publish_task(task, tmp_path / "run", harness="sim", team_size=2)
    environment = published_environment(read_published(tmp_path / "run"))
    # Workers build the very environment the evaluator scores with: pytest included.
    assert environment.python == "3.11" and environment.image == "swarm:local"
    assert environment.dependencies == ("attrs>=23.1", f"pytest=={installed.__version__}")
    assert published_environment({"name": "old hub", "goal": "g"}).is_default
