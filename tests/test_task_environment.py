"""Per-task environments: a real venv with a real dependency from PyPI, built once into the
cache, used by the evaluator's scoring and by an agent's sandboxed command (real bwrap)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import make_runtime

from swarm.db import Database
from swarm.evaluation import evaluate
from swarm.harness import SessionContext, SessionResult
from swarm.hub.server import BackgroundHub, free_port
from swarm.sandbox import BoxSpec, get_sandbox, run
from swarm.sandbox.env import agent_env
from swarm.tasks import load_task
from swarm.tasks.environment import ensure_environment, task_environment
from swarm.tasks.fetch import cache_dir
from swarm.tasks.tables import TaskEnvironment
from swarm.worker.runtime import WorkerOptions, WorkerRuntime
from tests.test_evaluation import bare_repo_with

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap"),
]
DEPENDENCY = "inflection==0.5.1"  # small, pure Python, and not among swarm's own packages


def env_task(root: Path) -> Path:
    (root / "start" / "words").mkdir(parents=True)
    (root / "start" / "words" / "__init__.py").write_text(
        "import inflection\n\ndef plural(word):\n    return inflection.pluralize(word)\n"
    )
    (root / "hidden").mkdir()
    (root / "hidden" / "test_words.py").write_text(
        "import sys\nimport words\n\n"
        "def test_plural():\n    assert words.plural('octopus') == 'octopi'\n\n"
        "def test_runs_in_the_task_environment():\n"
        "    assert 'envs' in sys.prefix and sys.prefix != sys.base_prefix\n"
    )
    (root / "goal.md").write_text("goal")
    (root / "task.toml").write_text(
        "name = 'words'\neval_command = 'python -m pytest -q {hidden}'\n\n"
        f"[environment]\npython = '3.11'\ndependencies = ['{DEPENDENCY}']\n"
    )
    return root


def test_the_task_environment_scores_and_runs_agents_commands(tmp_path: Path) -> None:
    assert subprocess.run([sys.executable, "-c", "import inflection"]).returncode != 0
    task = load_task(env_task(tmp_path / "task"))
    said: list[str] = []
    started = time.monotonic()
    env = task_environment(task, say=said.append)
    built = time.monotonic() - started
    assert env is not None and env.path.is_relative_to(cache_dir() / "envs")
    assert any("building the task's environment" in line for line in said)
    assert any("environment ready" in line for line in said)
    # Cached: the second time is a look-up, with nothing to show.
    again: list[str] = []
    started = time.monotonic()
    assert task_environment(task, say=again.append) == env and again == []
    print(f"environment built in {built:.1f}s, found again in {time.monotonic() - started:.3f}s")
    bare, _ = bare_repo_with(task.start_dir, tmp_path)
    checkpoint = evaluate(task, bare, workdir=tmp_path / "ev", python_env=env)
    assert (checkpoint.status, checkpoint.passed, checkpoint.total) == ("scored", 2, 2), (
        checkpoint.output_tail[-1500:]
    )
    # An agent's command: the environment's python first on PATH, read-only inside the box.
    checkout = tmp_path / "checkout"
    shutil.copytree(task.start_dir, checkout)
    agent = agent_env(hub_url="http://127.0.0.1:1", token="t", worker="w1")
    agent["PATH"] = os.pathsep.join([str(env.bin_dir), agent["PATH"]])
    box = get_sandbox("bwrap").open(
        BoxSpec(name="w1", checkout=checkout, env=agent, extra_ro=env.ro_paths())
    )
    try:
        done = run(
            box, ["python", "-c", "import words, sys; print(words.plural('cat'), sys.prefix)"]
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["cats", str(env.path)]
        write = run(box, ["sh", "-c", f"touch {env.path}/x"])
        assert write.returncode != 0 and "Read-only" in write.stderr
    finally:
        box.close()


def test_a_killed_build_leaves_no_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARM_CACHE_DIR", str(tmp_path / "cache"))  # the builder's too
    spec = TaskEnvironment("3.11", (DEPENDENCY, "six"))
    code = (
        "from swarm.tasks.environment import ensure_environment\n"
        "from swarm.tasks.tables import TaskEnvironment\n"
        f"ensure_environment(TaskEnvironment('3.11', {spec.dependencies!r}))\n"
    )
    builder = subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    root = cache_dir() / "envs"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and builder.poll() is None:
        if any(p.is_file() for p in root.glob("*.*/bin/python")):
            break
        time.sleep(0.01)
    os.killpg(builder.pid, signal.SIGKILL)  # mid-build: the venv is there, pip is not done
    builder.wait()
    links = [p for p in root.iterdir() if p.is_symlink()]
    orphans = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    assert orphans and not any(p.resolve() in orphans for p in links), "the build finished"
    env = ensure_environment(spec)
    assert env is not None and (env.path / ".swarm-env.json").is_file()
    done = subprocess.run([str(env.python), "-c", "import inflection, six"])
    assert done.returncode == 0
    left = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    assert left == [env.path]  # the killed build's folder was removed


class ProbeHarness:
    """Runs one command in the session's sandbox, as an agent would, and keeps what it said."""

    name = "probe"

    def __init__(self) -> None:
        self.said: list[str] = []

    def run_session(self, ctx: SessionContext) -> SessionResult:
        assert ctx.box is not None
        code = "import inflection, os, sys; print(inflection.pluralize('box'), sys.prefix)"
        done = run(ctx.box, ["python", "-c", code])
        self.said.append(done.stdout.strip() or done.stderr.strip())
        return SessionResult("submitted", steps=1)


def test_every_agent_sandbox_of_a_worker_has_the_task_environment(
    db: Database, tmp_path: Path
) -> None:
    task = load_task(env_task(tmp_path / "task"))
    env = task_environment(task)
    assert env is not None
    port = free_port()  # the workspace's clone URL names the hub's real port
    with BackgroundHub(make_runtime(db, tmp_path, port=port), port=port) as hub:
        harness = ProbeHarness()
        worker = WorkerRuntime(
            WorkerOptions(
                hub_url=hub.url,
                join_token=hub.runtime.operator_token,
                workdir_root=tmp_path / "workers",
                goal="g",
                harness="probe",
                max_sessions=2,
                sandbox="bwrap",
                python_env=env,
            ),
            stop=threading.Event(),
            harness=harness,
        )
        worker.run()
    assert harness.said == [f"boxes {env.path}"] * 2, harness.said
