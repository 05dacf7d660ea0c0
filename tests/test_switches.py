"""Ablation switches: each one really removes its mechanism, enforced by the hub (a disabled
route refuses and changes nothing; `sw` says so; delivery blocks lack it), and a run records
them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from swarm.config import Settings
from swarm.db import Database
from swarm.hub.server import BackgroundHub
from swarm.switches import KNOWN, parse_without
from swarm.tools.client import HubClient, HubError
from tests.conftest import make_runtime

SW = str(Path(sys.executable).parent / "sw")

# Every call that belongs to each mechanism: (method, path, body or params).
ROUTES: dict[str, list[tuple[str, str, dict[str, object] | None]]] = {
    "context": [
        ("POST", "/v1/entries", {"type": "FACT", "body": "parsers are hard"}),
        ("POST", "/v1/entries", {"type": "fail", "body": "tried regexes"}),
        ("POST", "/v1/entries", {"type": "OBSERVED", "body": "a test output"}),
        ("GET", "/v1/entries", None),
        ("GET", "/v1/entries/1", None),
        ("GET", "/v1/grep?pattern=x", None),
        ("GET", "/v1/feed", None),
    ],
    "claims": [
        ("POST", "/v1/entries", {"type": "CLAIM", "body": "mine", "scope": ["src/a.py"]}),
        ("GET", "/v1/claims", None),
        ("POST", "/v1/claims/1/renew", {}),
        ("POST", "/v1/claims/1/release", None),
    ],
    "dms": [
        ("POST", "/v1/dm", {"to": "w1", "body": "hello"}),
        ("GET", "/v1/messages?worker=w1", None),
    ],
    "channel": [
        ("POST", "/v1/channel", {"body": "hello all"}),
        ("GET", "/v1/inbox", None),
        ("GET", "/v1/messages", None),
    ],
    "grep": [("GET", "/v1/grep?pattern=x", None)],
    "reviews": [("POST", "/v1/prs/1/reviews", {"verdict": "approve", "body": "ok"})],
}


@pytest.fixture
def hub_without(tmp_path: Path) -> Iterator[Callable[[str], BackgroundHub]]:
    """Starts a hub (a database of its own) without the given mechanisms."""
    servers: list[BackgroundHub] = []

    def start(without: str) -> BackgroundHub:
        where = tmp_path / f"hub-{len(servers)}"
        db = Database(f"sqlite:///{where}.db")
        db.create_schema()
        server = BackgroundHub(make_runtime(db, where, without=without)).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


def worker(hub: BackgroundHub) -> HubClient:
    with HubClient(hub.url, hub.runtime.operator_token) as operator:
        token = operator.register()["token"]
    return HubClient(hub.url, token, retry_for=0)


def call(
    client: HubClient, method: str, path: str, body: dict[str, object] | None
) -> HubError | None:
    path, _, query = path.partition("?")
    params = dict(pair.split("=", 1) for pair in query.split("&")) if query else None
    try:
        client.call(method, path, json=body if method == "POST" else None, params=params)
    except HubError as exc:
        return exc
    return None


@pytest.mark.parametrize("name", KNOWN)
def test_each_switch_refuses_its_calls_and_changes_nothing(
    hub_without: Callable[[str], BackgroundHub], name: str
) -> None:
    hub = hub_without(name)
    client = worker(hub)
    for method, path, body in ROUTES[name]:
        error = call(client, method, path, body)
        assert error is not None and error.status == 403, (method, path, error)
        assert error.message.startswith(f"disabled in this run (--without {name}): this run has no")
        assert error.payload["kind"] == "Disabled"
    assert hub.runtime.context.head() == 0  # nothing was recorded
    assert hub.runtime.messages.history(channel=None, worker=None, after_id=0, limit=10) == []
    # The other mechanisms still answer (whatever else they say, never "disabled").
    for other in KNOWN:
        if other == name or (name, other) == ("context", "grep"):  # grep searches the context
            continue
        for method, path, body in ROUTES[other]:
            if (method, path, body) in ROUTES[name]:
                continue
            error = call(client, method, path, body)
            assert error is None or "disabled in this run" not in error.message, (other, path)
    assert client.call("GET", "/v1/whoami")["result"]["without"] == [name]
    assert client.call("GET", "/health")["without"] == [name]


def test_with_every_mechanism_nothing_is_disabled(
    hub_without: Callable[[str], BackgroundHub],
) -> None:
    client = worker(hub_without(""))
    for routes in ROUTES.values():
        for method, path, body in routes:
            error = call(client, method, path, body)
            assert error is None or "disabled" not in error.message, (path, error)


def test_without_the_context_deliveries_carry_no_entries(
    hub_without: Callable[[str], BackgroundHub],
) -> None:
    for without, seen in (("", 1), ("context", 0)):
        hub = hub_without(without)
        a, b = worker(hub), worker(hub)
        b.call("GET", "/v1/whoami")
        a.record("CLAIM", f"mine ({without})", scope=["src/a.py"])
        delivery = b.call("GET", "/v1/whoami")["delivery"]
        assert len(delivery["entries"]) == seen, without


def test_without_dms_no_overlap_dm_is_sent_and_none_is_delivered(
    hub_without: Callable[[str], BackgroundHub],
) -> None:
    for without, dms in (("", 1), ("dms", 0)):
        hub = hub_without(without)
        a, b = worker(hub), worker(hub)
        a.record("CLAIM", "parser", scope=["src/p.py"])
        answer = b.record("CLAIM", "parser too", scope=["src/p.py"])
        assert len(answer["result"]["overlaps"]) == 1  # the claimer still learns of it
        assert len(a.call("GET", "/v1/whoami")["delivery"]["messages"]) == dms, without


def test_without_grep_the_delivery_names_no_grep(
    hub_without: Callable[[str], BackgroundHub],
) -> None:
    for without, hint in (("", True), ("grep", False)):
        hub = hub_without(without)
        a, b = worker(hub), worker(hub)
        b.call("GET", "/v1/whoami")
        for n in range(12):  # more than a delivery shows
            a.record("FACT", f"fact {n}")
        delivery = b.call("GET", "/v1/whoami")["delivery"]
        assert delivery["more"] > 0 and ("grep" in delivery) == hint, without


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("claims", ["claim", "src/a.py", "-m", "mine"]),
        ("context", ["fact", "a fact"]),
        ("dms", ["dm", "w1", "hello"]),
        ("channel", ["say", "hello all"]),
        ("grep", ["grep", "x"]),
        ("reviews", ["pr", "review", "1", "approve", "-m", "ok"]),
    ],
)
def test_sw_says_the_command_is_disabled(
    hub_without: Callable[[str], BackgroundHub], name: str, args: list[str]
) -> None:
    hub = hub_without(name)
    client = worker(hub)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARM_")}
    env.update(SWARM_HUB_URL=hub.url, SWARM_TOKEN=str(client.token), SWARM_HUB_RETRY_SECONDS="0")
    done = subprocess.run([SW, *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"sw: error: disabled in this run (--without {name}): this run has no" in done.stderr
    whoami = subprocess.run([SW, "whoami"], env=env, capture_output=True, text=True, timeout=60)
    assert f"this run is without: {name}" in whoami.stdout


def test_unknown_switches_are_refused_with_the_known_ones(tmp_path: Path) -> None:
    from swarm.errors import InvalidInput
    from swarm.worker.run_cli import run_command

    assert parse_without("grep, claims,claims") == ("claims", "grep")
    assert parse_without("") == ()
    with pytest.raises(InvalidInput, match="unknown mechanism claim in --without"):
        parse_without("claim")
    result = CliRunner().invoke(run_command, [str(tmp_path), "--without", "claims,chat"])
    assert result.exit_code == 2
    assert "known: channel, claims, context, dms, grep, reviews" in result.output
    with pytest.raises(ValueError, match="needs reviews"):
        Settings(without="reviews", required_approvals=1)


def test_run_toml_records_the_switches_and_resume_keeps_them(tmp_path: Path) -> None:
    from swarm.report.runinfo import read_run_info
    from swarm.tasks.demo import make_demo_task
    from swarm.worker.run import RunPlan, read_run_file, resume_plan, write_run_file

    task = make_demo_task(tmp_path / "task")
    for without in ((), ("claims", "dms")):
        run_dir = tmp_path / f"run-{len(without)}"
        run_dir.mkdir()
        write_run_file(RunPlan(task=task, run_dir=run_dir, without=without), started=1.0)
        assert read_run_file(run_dir)["without"] == list(without)
        assert read_run_info(run_dir).without == without
        assert resume_plan(run_dir).without == without
