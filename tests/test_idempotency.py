"""Retried writes: an Idempotency-Key makes a write apply once and answer the same; the client
retries connection errors and 5xx answers and says so."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from swarm.bootstrap import Runtime
from swarm.hub.server import BackgroundHub, free_port
from swarm.tools.client import HubClient, HubError, HubUnreachable
from tests.conftest import make_runtime


def _entries(runtime: Runtime) -> int:
    return sum(runtime.context.count_by_type().values())


def test_a_retried_append_is_applied_once_and_answers_the_same(
    hub: BackgroundHub, new_worker: Callable[[], HubClient]
) -> None:
    worker = new_worker()
    headers = {"Authorization": f"Bearer {worker.token}", "Idempotency-Key": "k-1"}
    body = {"type": "FACT", "body": "the parser handles tabs"}
    first = httpx.post(hub.url + "/v1/entries", json=body, headers=headers)
    again = httpx.post(
        hub.url + "/v1/entries", json=body, headers={**headers, "Idempotency-Attempt": "2"}
    )
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert again.headers.get("idempotent-replay") == "true"
    assert _entries(hub.runtime) == 1
    # Another key is another write.
    other = httpx.post(
        hub.url + "/v1/entries", json=body, headers={**headers, "Idempotency-Key": "k-2"}
    )
    assert other.json()["result"]["entry"]["id"] != first.json()["result"]["entry"]["id"]
    assert _entries(hub.runtime) == 2


def test_keys_are_per_caller_and_a_bad_key_is_refused(
    hub: BackgroundHub, new_worker: Callable[[], HubClient]
) -> None:
    alice, bob = new_worker(), new_worker()
    body = {"type": "FACT", "body": "x"}
    for client in (alice, bob):
        headers = {
            "Authorization": f"Bearer {client.token}",
            "Idempotency-Key": "same",
            "Idempotency-Attempt": "2",
        }
        assert httpx.post(hub.url + "/v1/entries", json=body, headers=headers).status_code == 200
    assert _entries(hub.runtime) == 2  # bob's key never replays alice's answer
    bad = httpx.post(
        hub.url + "/v1/entries",
        json=body,
        headers={"Authorization": f"Bearer {alice.token}", "Idempotency-Key": "x" * 200},
    )
    assert bad.status_code == 422 and "Idempotency-Key" in bad.json()["error"]


def test_a_stored_answer_survives_a_hub_restart(runtime: Runtime, tmp_path: Path) -> None:
    port = free_port()
    with BackgroundHub(runtime, port=port) as hub:
        with HubClient(hub.url, runtime.operator_token) as op:
            token = op.register()["token"]
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "before-restart"}
        first = httpx.post(
            hub.url + "/v1/entries", json={"type": "FACT", "body": "a"}, headers=headers
        )
    again_runtime = make_runtime(runtime.db, tmp_path)
    with BackgroundHub(again_runtime, port=port) as hub:
        again = httpx.post(
            hub.url + "/v1/entries",
            json={"type": "FACT", "body": "a"},
            headers={**headers, "Idempotency-Attempt": "3"},
        )
    assert again.json() == first.json()
    assert _entries(again_runtime) == 1


def test_the_client_rides_out_a_hub_that_comes_back(runtime: Runtime) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with BackgroundHub(runtime, port=port), HubClient(url, runtime.operator_token) as op:
        token = op.register()["token"]
    waits: list[str] = []
    client = HubClient(url, token, retry_for=30, on_wait=lambda e, s: waits.append(e.message))
    later = threading.Timer(2.0, lambda: hubs.append(BackgroundHub(runtime, port=port).start()))
    hubs: list[BackgroundHub] = []
    later.start()
    try:
        started = time.monotonic()
        answer = client.record("FACT", "written while the hub was down")
        assert answer["result"]["entry"]["body"] == "written while the hub was down"
        assert time.monotonic() - started >= 1.5
        assert waits and "cannot reach the hub" in waits[0]
    finally:
        later.join()
        client.close()
        for h in hubs:
            h.stop()
    assert _entries(runtime) == 1


def test_the_client_gives_up_after_its_retry_time() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with HubClient(url, "t", retry_for=1.0) as client, pytest.raises(HubUnreachable):
        client.call("GET", "/v1/whoami")
    assert 0.9 <= time.monotonic() - started < 10
    with HubClient(url, "t", retry_for=0) as client, pytest.raises(HubError):
        client.call("GET", "/v1/whoami")


def test_sw_says_on_stderr_that_it_is_waiting(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SWARM_HUB_URL": f"http://127.0.0.1:{free_port()}",
        "SWARM_TOKEN": "swt_nothing",
        "SWARM_HUB_RETRY_SECONDS": "1.5",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    done = subprocess.run(
        [str(Path(sys.executable).parent / "sw"), "fact", "x"],
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode != 0
    assert "sw: waiting for the hub" in done.stderr
    assert "cannot reach the hub" in done.stderr
