"""Secrets of a run: the join token registers the declared workers only, and no token or
password is written where another user of the machine could read it."""

from __future__ import annotations

import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarm.bootstrap import build_runtime
from swarm.config import Settings
from swarm.hub.server import BackgroundHub
from swarm.sandbox import NONE_WARNING
from swarm.tasks.demo import make_demo_task
from swarm.tools.client import HubClient, HubError
from swarm.worker.run import RunPlan, write_private, write_run_file

JOIN = "swj_join-token-of-this-run-0123"


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[BackgroundHub]:
    settings = Settings(run_dir=tmp_path / "run", join_token=JOIN, max_workers=2)
    runtime = build_runtime(settings)
    with BackgroundHub(runtime) as server:
        yield server
    runtime.close()


def test_the_join_token_registers_the_declared_workers_and_no_more(hub: BackgroundHub) -> None:
    assert hub.runtime.join_token != hub.runtime.operator_token
    with HubClient(hub.url, JOIN) as joiner:
        first, second = joiner.register(), joiner.register()
        with pytest.raises(HubError, match="declared 2 workers") as refused:
            joiner.register()
    assert refused.value.status == 403 and {first["name"], second["name"]} == {"w1", "w2"}
    with HubClient(hub.url, first["token"]) as worker, pytest.raises(HubError) as not_a_joiner:
        worker.register()  # a worker's own token registers nobody
    assert not_a_joiner.value.status == 403
    with HubClient(hub.url, hub.runtime.operator_token) as operator:
        assert operator.register()["name"] == "w3"  # the operator is not bound by it


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_run_files_are_the_owners_only(tmp_path: Path) -> None:
    task = make_demo_task(tmp_path / "task")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    secret = run_dir / "operator.token"
    secret.write_text("old\n")
    secret.chmod(0o644)  # an earlier file of that name, readable by everyone
    write_private(secret, "swo_new-token\n")
    assert mode(secret) == 0o600 and secret.read_text() == "swo_new-token\n"
    plan = RunPlan(
        task=task,
        run_dir=run_dir,
        sandbox="none",
        database_url="postgresql+psycopg://swarm:hunter2@db:5432/swarm",
    )
    write_run_file(plan, hub_url="http://127.0.0.1:1")
    saved = tomllib.loads((run_dir / "run.toml").read_text())
    assert mode(run_dir / "run.toml") == 0o600  # it holds the database's password
    assert saved["sandbox"] == "none" and saved["sandbox_warning"] == NONE_WARNING
    assert not list(run_dir.glob(".*.tmp"))
