"""The compose deployment for real: scripts/compose-check on the machine's Docker engine, and the
hub's task route that lets a worker start with only the hub's URL and the join token."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from swarm.bootstrap import build_runtime
from swarm.config import Settings
from swarm.hub.server import BackgroundHub, free_port
from swarm.tasks.demo import make_demo_task
from swarm.tasks.model import load_task
from swarm.tasks.published import publish_task
from swarm.workspace.repo import init_repo

ROOT = Path(__file__).resolve().parents[1]
JOIN = "join-token-0123456789"
OPERATOR = "operator-token-0123456789"


@pytest.fixture
def task_hub(tmp_path: Path) -> Iterator[BackgroundHub]:
    # The run's repository is made before the hub starts, as the compose bootstrap does.
    init_repo(tmp_path / "run" / "workspace.git", make_demo_task(tmp_path / "task").start_dir)
    port = free_port()
    settings = Settings(
        run_dir=tmp_path / "run", join_token=JOIN, operator_token=OPERATOR, port=port
    )
    with BackgroundHub(build_runtime(settings), port=port) as hub:
        yield hub


def test_the_task_route_serves_the_goal_and_only_a_sim_run_gets_the_solution(
    task_hub: BackgroundHub, tmp_path: Path
) -> None:
    url, run_dir = task_hub.url, task_hub.runtime.settings.run_dir
    missing = httpx.get(f"{url}/v1/task", headers={"Authorization": f"Bearer {JOIN}"})
    assert missing.status_code == 503 and "bootstrap" in missing.json()["error"]
    task = load_task(tmp_path / "task")
    publish_task(task, run_dir, harness="sim", team_size=4)
    got = httpx.get(f"{url}/v1/task", headers={"Authorization": f"Bearer {JOIN}"}).json()
    assert got["result"]["goal"] == task.goal_text() and got["result"]["team_size"] == 4
    assert task.solution_path is not None
    assert got["result"]["solution"] == task.solution_path.read_text()
    hidden = {p.read_text() for p in task.hidden_dir.rglob("*.py")}
    assert hidden and not any(h in str(got) for h in hidden)
    publish_task(task, run_dir, harness="mini", team_size=4)
    got = httpx.get(f"{url}/v1/task", headers={"Authorization": f"Bearer {JOIN}"}).json()
    assert got["result"]["solution"] is None and got["result"]["harness"] == "mini"
    refused = httpx.get(f"{url}/v1/task", headers={"Authorization": "Bearer not-a-token-at-all"})
    assert refused.status_code in (401, 403)


def test_a_worker_runs_with_only_the_hub_url_and_the_join_token(
    task_hub: BackgroundHub, tmp_path: Path
) -> None:
    """`swarm worker` without --task: the sim workers take goal and units from the hub."""
    task = load_task(tmp_path / "task")
    run_dir = task_hub.runtime.settings.run_dir
    publish_task(task, run_dir, harness="sim", team_size=2)
    done = subprocess.run(
        [sys.executable, "-m", "swarm", "worker", "--count", "2", "--think", "0",
         "--workdir-root", str(tmp_path / "workers")],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "SWARM_HUB_URL": task_hub.url,
             "SWARM_JOIN_TOKEN": JOIN, "SWARM_WORKER_NICE": "0", "HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    merged = task_hub.runtime.workspace.list_prs(state="merged", limit=100)  # type: ignore[union-attr]
    assert len(merged) == 12, [p.title for p in merged]


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(1800)  # a fresh machine builds the base and project images first
def test_compose_check_runs_the_stack_for_real() -> None:
    """scripts/compose-check: the real docker-compose.yml on a real Docker engine."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "compose-check")],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    last = done.stdout.strip().splitlines()[-1:] or [done.stderr[-500:]]
    if done.returncode == 77:
        pytest.skip(last[0])
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert last[0].startswith("compose: ") and "checks passed" in last[0]


def bootstrap(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "HOME": str(tmp_path),
        "SWARM_TASK_DIR": str(tmp_path / "task"),
        "SWARM_SECRETS_DIR": str(tmp_path / "secrets"),
        "SWARM_RUN_DIR": str(tmp_path / "run"),
        "SWARM_EVALUATOR_DIR": str(tmp_path / "evaluator"),
        "SWARM_JOIN_TOKEN": JOIN,
        "SWARM_OPERATOR_TOKEN": OPERATOR,
    }
    return subprocess.run(
        [sys.executable, str(ROOT / "infra" / "bootstrap" / "bootstrap.py")],
        env=base | env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_bootstrap_refuses_bad_input_in_one_line_and_recovers_when_fixed(tmp_path: Path) -> None:
    make_demo_task(tmp_path / "task")
    (tmp_path / "evaluator").mkdir()
    placeholder = bootstrap(tmp_path, SWARM_JOIN_TOKEN="changeme")
    assert placeholder.returncode == 1
    assert placeholder.stderr.strip().splitlines() == [
        placeholder.stderr.strip()
    ] and placeholder.stderr.startswith("bootstrap: SWARM_JOIN_TOKEN in .env is a placeholder")
    assert not (tmp_path / "run").exists(), "a refused bootstrap changes nothing"
    for server, env in (
        ("Gitea", {"SWARM_WORKSPACE": "gitea", "SWARM_GITEA_URL": "http://127.0.0.1:9",
                   "GITEA_ADMIN_USER": "admin", "GITEA_ADMIN_PASSWORD": "p" * 16}),
        ("Mattermost", {"SWARM_MESSAGES": "mattermost", "SWARM_MATTERMOST_URL":
                        "http://127.0.0.1:9", "MATTERMOST_ADMIN_USER": "admin",
                        "MATTERMOST_ADMIN_PASSWORD": "p" * 16}),
    ):  # fmt: skip
        down = bootstrap(tmp_path, **env)
        assert down.returncode == 1 and "Traceback" not in down.stderr, down.stderr
        assert down.stderr.startswith(f"bootstrap: {server}") or (
            f"bootstrap: cannot reach {server} at http://127.0.0.1:9" in down.stderr
        ), down.stderr
        assert len(down.stderr.strip().splitlines()) == 1, down.stderr
    # Fixed: the embedded set-up succeeds, and a second run keeps what the first made.
    for run in (1, 2):
        fixed = bootstrap(tmp_path)
        assert fixed.returncode == 0, fixed.stderr
        assert "embedded workspace " + ("" if run == 1 else "kept") in fixed.stdout
    assert (tmp_path / "evaluator" / "repo.url").read_text() == str(
        tmp_path / "run" / "workspace.git"
    )
    published = (tmp_path / "run" / "task.json").read_text()
    assert '"harness": "sim"' in published and "def test_" not in published


def test_a_hub_whose_database_does_not_answer_says_so_in_one_line(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://hub:secret-password@127.0.0.1:{free_port()}/hub"
    done = subprocess.run(
        [sys.executable, "-m", "swarm", "hub"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "SWARM_RUN_DIR": str(tmp_path),
             "SWARM_DATABASE_URL": url, "SWARM_HUB_DATABASE_WAIT": "3"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("swarm hub: cannot open the database at postgresql") and (
        "retrying" in first and "SWARM_DATABASE_URL" in first and "secret-password" not in first
    ), done.stderr
