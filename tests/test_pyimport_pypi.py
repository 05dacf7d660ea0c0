"""End to end: `swarm task import` of real PyPI sdists of three shapes (a module of functions;
a package of classes with methods; a package with a runtime dependency, declared in
[environment]), each checked by `swarm task check` (start near 0, reference all), and a
4-worker `sim` run on each reaching the reference's score. Real downloads (cached for
the session), the real evaluator in bwrap, real subprocess CLIs."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from swarm.errors import NotFound
from swarm.tasks.model import load_task
from swarm.tasks.pyimport.source import fetch_project
from swarm.tasks.units import load_units

PROJECTS = {
    # name: (source, hidden tests the reference passes, what the shape is)
    "xmltodict": ("pypi:xmltodict==1.0.4", 119),  # one module: functions and a SAX handler
    "cachetools": ("pypi:cachetools==5.5.0", 215),  # src/ layout: classes with many methods
    "python-slugify": ("pypi:python-slugify==9.2.0", 140),  # needs text-unidecode at run time
}


def swarm(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600):
    return subprocess.run(
        [sys.executable, "-m", "swarm", *args], cwd=cwd, capture_output=True, text=True,
        timeout=timeout, env={**os.environ, **(env or {})},
    )  # fmt: skip


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("imports")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PROJECTS))
def test_a_pypi_project_imports_and_checks_sound(name: str, workdir: Path) -> None:
    source, tests = PROJECTS[name]
    done = swarm("task", "import", source, cwd=workdir)  # DEST: tasks/NAME here
    assert done.returncode == 0, done.stdout + done.stderr
    dest = workdir / "tasks" / name
    assert "verdict: sound (start near 0, reference all)" in done.stdout
    assert f"reference: {tests}/{tests} passed (100.0%)" in done.stdout
    data = tomllib.loads((dest / "task.toml").read_text())
    check = data["check"]
    assert check["tests"] == tests == check["reference_passed"]
    assert check["start_passed"] <= 0.1 * tests
    task = load_task(dest)
    assert task.check is not None and len(task.check.pinned_ids()) == tests
    units = load_units(task)
    assert len(units) >= 5
    if name == "python-slugify":
        assert data["environment"]["dependencies"] == ["text-unidecode>=1.3"]
        assert "kept slugify.special.add_uppercase_char" in done.stderr  # runs at import
    if name == "cachetools":
        prefix = 'PYTHONPATH="$PWD/src:$PYTHONPATH" python -m pytest -q --tb=line'
        assert task.eval_command.startswith(prefix)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PROJECTS))
def test_a_4_worker_sim_run_on_an_imported_task_reaches_the_reference(
    name: str, workdir: Path
) -> None:
    source, tests = PROJECTS[name]
    dest = workdir / "tasks" / name
    if not (dest / "task.toml").exists():
        done = swarm("task", "import", source, "--no-check", cwd=workdir)
        assert done.returncode == 0, done.stderr
    run_dir = workdir / f"run-{name}"
    done = swarm(
        "run", name, "--harness", "sim", "--workers", "4", "--think", "0.2",
        "--eval-every", "10m", "--budget", "4m", "--run-dir", str(run_dir), "--quiet",
        cwd=workdir, env={"SWARM_TASKS_PATH": str(workdir / "tasks")},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"hidden tests on main: {tests}/{tests}" in done.stdout, done.stdout
    with sqlite3.connect(f"file:{run_dir / 'hub.db'}?mode=ro", uri=True) as conn:
        merged = conn.execute("SELECT COUNT(*) FROM pull_requests WHERE state = 'merged'")
        assert merged.fetchone()[0] == len(load_units(load_task(dest)))


@pytest.mark.slow
def test_a_version_pypi_does_not_have_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match=re.escape("PyPI has no xmltodict==0.0.999 (the newest is")):
        fetch_project("pypi:xmltodict==0.0.999", None, tmp_path)
    with pytest.raises(NotFound, match="PyPI has no project 'no-such-project-swarm-x1'"):
        fetch_project("pypi:no-such-project-swarm-x1==1.0", None, tmp_path)
