"""The hub over real HTTP (uvicorn on loopback): auth, authorship, delivery, errors."""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from conftest import make_runtime

from swarm.bootstrap import Runtime
from swarm.db import Database
from swarm.hub.server import (
    GC_YOUNG_THRESHOLD,
    SWITCH_INTERVAL,
    BackgroundHub,
    free_port,
    make_server,
)
from swarm.tools.client import HubClient, HubError


def test_health_and_openapi_need_no_token(hub: BackgroundHub) -> None:
    health = httpx.get(hub.url + "/health").json()
    assert health["status"] == "ok" and health["database"] in ("sqlite", "postgresql")
    paths = httpx.get(hub.url + "/openapi.json").json()["paths"]
    assert {"/v1/entries", "/v1/grep", "/v1/claims", "/v1/dm", "/v1/inbox"} <= set(paths)


@pytest.mark.parametrize(
    ("headers", "status", "message"),
    [
        ({}, 401, "missing bearer token"),
        ({"Authorization": "Bearer nope-not-a-token"}, 401, "unknown token"),
        ({"Authorization": "Basic abc"}, 401, "missing bearer token"),
    ],
)
def test_calls_without_a_valid_token_are_refused(
    hub: BackgroundHub, headers: dict[str, str], status: int, message: str
) -> None:
    response = httpx.post(
        hub.url + "/v1/entries", json={"type": "FACT", "body": "x"}, headers=headers
    )
    assert response.status_code == status and message in response.json()["error"]
    assert hub.runtime.context.head() == 0


def test_registration_needs_the_join_token(
    hub: BackgroundHub, new_worker: Callable[[], HubClient]
) -> None:
    worker = new_worker()
    with pytest.raises(HubError, match="join token") as info:
        HubClient(hub.url, worker.token).register()
    assert info.value.status == 403


def test_the_join_token_registers_only_the_declared_number_of_workers(
    db: Database, tmp_path: Path
) -> None:
    runtime = make_runtime(db, tmp_path, join_token="swj_" + "j" * 30, max_workers=2)
    with BackgroundHub(runtime) as hub:
        # The operator's own registrations (a person joining, a test's observer) do not count.
        HubClient(hub.url, runtime.operator_token).register()
        joined = [HubClient(hub.url, runtime.join_token).register()["name"] for _ in range(2)]
        with pytest.raises(HubError, match="declared 2 workers") as info:
            HubClient(hub.url, runtime.join_token).register()
        assert info.value.status == 403
        assert HubClient(hub.url, runtime.operator_token).register()["name"] == "w4"
    assert joined == ["w2", "w3"]
    assert len(runtime.registry.list()) == 4


def test_author_is_the_tokens_worker_not_a_field(new_worker: Callable[[], HubClient]) -> None:
    a, b = new_worker(), new_worker()
    b_name = b.call("GET", "/v1/whoami")["result"]["name"]
    recorded = a.call("POST", "/v1/entries", json={"type": "FACT", "body": "x", "author": b_name})[
        "result"
    ]["entry"]
    assert recorded["author"] != b_name and recorded["author"].startswith("w")


def test_operator_token_is_not_a_worker(operator: HubClient) -> None:
    with pytest.raises(HubError, match="worker's token") as info:
        operator.record("FACT", "x")
    assert info.value.status == 403


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"type": "NOPE", "body": "x"}, "unknown entry type"),
        ({"type": "FACT", "body": ""}, "body is empty"),
        ({"type": "FACT", "body": "x" * 9000}, "the limit is 8000"),
        ({"type": "FACT", "body": "x", "scope": "a.py"}, "scope must be a list"),
        ({"type": "FACT", "body": "x", "refs": [424242]}, "#424242"),
        ({"body": "x"}, "type: Field required"),
        ({"type": "FACT"}, "body: Field required"),
        ({"type": "FACT", "body": "x", "lease_seconds": "soon"}, "lease_seconds: Input should"),
        ({"type": "FACT", "body": "x", "lease_seconds": 0}, "a lease is 1 to 86400 seconds"),
        ({"type": "FACT", "body": "a\x00b"}, "contains a NUL character"),
        ({"type": "FACT", "body": "x", "scope": ["a\x00.py"]}, "a NUL character"),
    ],
)
def test_bad_entries_get_a_clear_4xx_and_change_nothing(
    hub: BackgroundHub,
    new_worker: Callable[[], HubClient],
    payload: dict[str, object],
    message: str,
) -> None:
    worker = new_worker()
    with pytest.raises(HubError) as info:
        worker.call("POST", "/v1/entries", json=payload)
    assert 400 <= info.value.status < 500 and message in info.value.message
    assert hub.runtime.context.head() == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "bad request: "),
        (b'["FACT", "x"]', "bad request: "),
        (b"", "bad request: "),
    ],
)
def test_an_entry_that_is_not_a_json_object_is_refused(
    hub: BackgroundHub, new_worker: Callable[[], HubClient], content: bytes, message: str
) -> None:
    token = new_worker().token
    answer = httpx.post(
        f"{hub.url}/v1/entries",
        content=content,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert answer.status_code == 422
    assert answer.json()["error"].startswith(message) and answer.json()["kind"] == "InvalidInput"
    assert hub.runtime.context.head() == 0


def test_every_answer_carries_peers_new_entries_once(new_worker: Callable[[], HubClient]) -> None:
    a, b = new_worker(), new_worker()
    first = a.record("FACT", "the parser lives in src/parser")["result"]["entry"]["id"]
    own = b.record("OBSERVED", "b's own finding")["delivery"]
    assert [e["id"] for e in own["entries"]] == [first]
    assert b.call("GET", "/v1/claims")["delivery"]["entries"] == []  # shown once only


def test_delivery_is_capped_with_a_grep_for_the_rest(
    hub: BackgroundHub, new_worker: Callable[[], HubClient]
) -> None:
    a, b = new_worker(), new_worker()
    cap = hub.runtime.settings.delivery_cap
    ids = [a.record("OBSERVED", f"finding {i}")["result"]["entry"]["id"] for i in range(cap + 5)]
    block = b.call("GET", "/v1/whoami")["delivery"]
    assert [e["id"] for e in block["entries"]] == ids[::-1][:cap]
    assert block["more"] == 5
    assert block["grep"] == f"sw grep . --after {ids[0] - 1} --before {ids[-1] + 1}"


def test_overlapping_claim_tells_the_other_owner_by_dm(new_worker: Callable[[], HubClient]) -> None:
    a, b = new_worker(), new_worker()
    first = a.record("CLAIM", "the parser", scope=["src/parser/**"])["result"]["entry"]["id"]
    answer = b.record("CLAIM", "lexer fix", scope=["src/parser/lexer.py"])["result"]
    second = answer["entry"]["id"]
    assert [c["id"] for c in answer["overlaps"]] == [first]
    dms = a.call("GET", "/v1/claims")["delivery"]["messages"]
    assert len(dms) == 1 and dms[0]["author"] == "hub"
    assert f"#{first}" in dms[0]["body"] and f"#{second}" in dms[0]["body"]
    assert a.call("GET", "/v1/claims")["delivery"]["messages"] == []  # exactly once


def test_claim_release_by_another_worker_is_forbidden(new_worker: Callable[[], HubClient]) -> None:
    a, b = new_worker(), new_worker()
    claim = a.record("CLAIM", "x", scope=["x.py"])["result"]["entry"]["id"]
    with pytest.raises(HubError, match="belongs to") as info:
        b.call("POST", f"/v1/claims/{claim}/release")
    assert info.value.status == 403
    assert a.call("GET", "/v1/claims")["result"]["claims"][0]["state"] == "active"


def test_grep_and_show_over_http(new_worker: Callable[[], HubClient]) -> None:
    a = new_worker()
    claim = a.record("CLAIM", "tokens", scope=["src/lexer.py"])["result"]["entry"]["id"]
    done = a.record("PATCH_SUMMARY", "lexer handles tabs; 12 tests pass", refs=[claim])
    assert done["result"]["ended"][0]["id"] == claim
    found = a.call("GET", "/v1/grep", params={"pattern": "TABS", "ignore_case": True})
    assert [e["type"] for e in found["result"]["entries"]] == ["PATCH_SUMMARY"]
    shown = a.call("GET", f"/v1/entries/{claim}")["result"]
    assert shown["claim"]["state"] == "completed"
    assert shown["referrers"][0]["id"] == done["result"]["entry"]["id"]
    with pytest.raises(HubError, match="invalid regular expression") as info:
        a.call("GET", "/v1/grep", params={"pattern": "(oops"})
    assert info.value.status == 422


def test_direct_messages_arrive_once_on_any_call_and_channel_only_in_the_digest(
    new_worker: Callable[[], HubClient], operator: HubClient
) -> None:
    a, b = new_worker(), new_worker()
    b_name = b.call("GET", "/v1/whoami")["result"]["name"]
    a.call("POST", "/v1/dm", json={"to": b_name, "body": "can you take the lexer?"})
    a.call("POST", "/v1/channel", json={"body": "I am on the parser"})
    operator.call("POST", "/v1/operator/channel", json={"body": "focus on tests first"})
    grep_answer = b.call("GET", "/v1/grep", params={"pattern": "."})
    assert [m["body"] for m in grep_answer["delivery"]["messages"]] == ["can you take the lexer?"]
    assert b.call("GET", "/v1/claims")["delivery"]["messages"] == []
    digest = b.call("GET", "/v1/inbox")["result"]["channel"]
    assert [(m["author"], m["body"]) for m in digest] == [
        (a.call("GET", "/v1/whoami")["result"]["name"], "I am on the parser"),
        ("operator", "focus on tests first"),
    ]
    assert b.call("GET", "/v1/inbox")["result"]["channel"] == []


def test_message_errors(new_worker: Callable[[], HubClient]) -> None:
    a = new_worker()
    with pytest.raises(HubError, match="no worker named") as info:
        a.call("POST", "/v1/dm", json={"to": "w999", "body": "hi"})
    assert info.value.status == 404
    with pytest.raises(HubError, match="the limit is 4000"):
        a.call("POST", "/v1/channel", json={"body": "x" * 4001})
    with pytest.raises(HubError, match="contains a NUL character") as info:
        a.call("POST", "/v1/channel", json={"body": "a\x00b"})
    assert info.value.status == 422


def test_status_heartbeat_and_stop_releases_claims(
    hub: BackgroundHub, new_worker: Callable[[], HubClient], operator: HubClient
) -> None:
    a = new_worker()
    a.record("CLAIM", "x", scope=["x.py"])
    a.report("in_session", {"session": 1})
    roster = operator.call("GET", "/v1/workers")["result"]["workers"]
    assert roster[0]["state"] == "in_session" and roster[0]["status"] == {"session": 1}
    answer = a.call("POST", "/v1/status", json={"state": "stopped", "status": {}})
    assert len(answer["result"]["released"]) == 1
    assert a.call("GET", "/v1/claims")["result"]["claims"] == []
    operator.call("POST", "/v1/operator/stop")
    assert a.call("POST", "/v1/status", json={"state": "idle"})["result"]["stop"] is True


def test_a_hub_process_tunes_the_interpreter(runtime: Runtime) -> None:
    """`swarm hub` serves as a dedicated process: what lives at startup leaves the collector's
    reach, the young generation is collected far less often than CPython's default, and a
    thread waiting for the GIL gets it sooner."""
    gc.unfreeze()
    thresholds, interval = gc.get_threshold(), sys.getswitchinterval()
    port = free_port()
    server = make_server(runtime, "127.0.0.1", port, dedicated_process=True)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.started
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD > 10 * thresholds[0]
        assert sys.getswitchinterval() == SWITCH_INTERVAL < interval / 5
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        sys.setswitchinterval(interval)
