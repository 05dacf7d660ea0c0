"""Every number and string is checked at the hub's edge: no 500s, nothing stored that breaks a
later read, and bodies over the limit refused before they are read (issue "The hub's trust
rules"). Each runs on SQLite and PostgreSQL through the `hub` fixture."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import httpx
import pytest

from swarm.hub.server import BackgroundHub
from swarm.tools.client import HubClient

HUGE = 2**63  # one past the largest 64-bit signed id


def _auth(client: HubClient) -> dict[str, str]:
    return {"Authorization": f"Bearer {client.token}"}


@pytest.mark.parametrize(
    ("method", "path", "payload"),
    [
        ("GET", f"/v1/entries/{HUGE}", None),
        ("POST", f"/v1/claims/{HUGE}/renew", {}),
        ("POST", f"/v1/claims/{HUGE}/release", None),
        ("GET", f"/v1/prs/{HUGE}", None),
        ("POST", f"/v1/prs/{HUGE}/merge", None),
        ("POST", f"/v1/prs/{HUGE}/close", None),
        ("POST", f"/v1/prs/{HUGE}/reviews", {"verdict": "approve"}),
        ("POST", f"/v1/sessions/{HUGE}/end", {"ended": "done"}),
        ("GET", f"/v1/grep?pattern=x&after={HUGE}", None),
        ("GET", f"/v1/grep?pattern=x&before={HUGE}", None),
        ("GET", f"/v1/messages?after={HUGE}", None),
        ("GET", f"/dashboard/api/entries?before={HUGE}", None),
        ("GET", f"/dashboard/api/entries/{HUGE}", None),
        ("GET", f"/dashboard/api/grep?pattern=x&before={HUGE}", None),
        ("GET", f"/dashboard/api/claims?before={HUGE}", None),
        ("GET", f"/dashboard/api/prs?before={HUGE}", None),
        ("GET", f"/dashboard/api/prs/{HUGE}", None),
        ("GET", f"/dashboard/api/channel?before={HUGE}", None),
        ("GET", f"/dashboard/api/thread?a=w1&b=w2&before={HUGE}", None),
        ("POST", "/v1/sessions/1/end", {"ended": "done", "tokens_in": HUGE}),
        ("POST", "/v1/sessions/1/end", {"ended": "done", "tokens_out": 2**31}),
        ("POST", "/v1/entries", {"type": "FACT", "body": "x", "refs": [HUGE]}),
    ],
)
def test_numbers_past_64_bits_are_refused_not_500(
    hub: BackgroundHub,
    new_worker: Callable[[], HubClient],
    method: str,
    path: str,
    payload: dict[str, object] | None,
) -> None:
    worker = new_worker()
    person = path.startswith("/dashboard")  # DM threads there are for people only
    token = hub.runtime.operator_token if person else worker.token
    headers = {"Authorization": f"Bearer {token}"}
    response = httpx.request(method, hub.url + path, json=payload, headers=headers)
    assert response.status_code in (404, 422), response.text
    assert response.json()["error"]


def test_infinite_cost_is_refused_and_the_summary_stays_a_number(
    hub: BackgroundHub, new_worker: Callable[[], HubClient], operator: HubClient
) -> None:
    worker = new_worker()
    session = worker.call("POST", "/v1/sessions", json={"harness": "sim"})["result"]["id"]
    for bad in ("Infinity", "NaN", "-Infinity", "-1"):
        body = f'{{"ended": "done", "cost": {bad}}}'
        response = httpx.post(
            f"{hub.url}/v1/sessions/{session}/end",
            content=body,
            headers={**_auth(worker), "content-type": "application/json"},
        )
        assert response.status_code == 422, (bad, response.text)
    cost = operator.call("GET", "/v1/summary")["result"]["cost"]
    assert cost == 0.0


@pytest.mark.parametrize(
    ("path", "template"),
    [
        ("/v1/channel", '{"body": "hi %s"}'),
        ("/v1/dm", '{"to": "w1", "body": "hi %s"}'),
        ("/v1/prs", '{"branch": "w1/x", "title": "t %s"}'),
        ("/v1/prs", '{"branch": "w1/x", "title": "t", "body": "b %s"}'),
        ("/v1/prs", '{"branch": "w1/x%s", "title": "t"}'),
        ("/v1/status", '{"state": "idle", "status": {"note": "%s"}}'),
        ("/v1/status", '{"state": "idle", "status": {"%s": 1}}'),
        ("/v1/entries", '{"type": "FACT", "body": "x", "scope": ["a%s.py"]}'),
        ("/v1/sessions", '{"harness": "sim", "model": "m%s"}'),
    ],
)
@pytest.mark.parametrize("bad", ["\\ud800", "\\udc00x", "\\u0000"])
def test_nul_and_lone_surrogates_are_refused_on_every_field(
    hub: BackgroundHub, new_worker: Callable[[], HubClient], path: str, template: str, bad: str
) -> None:
    worker = new_worker()
    response = httpx.post(
        hub.url + path,
        content=(template % bad).encode(),
        headers={**_auth(worker), "content-type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert "NUL" in response.json()["error"] or "surrogate" in response.json()["error"]
    roster = httpx.get(hub.url + "/v1/workers", headers=_auth(worker))
    assert roster.status_code == 200
    assert all(w["status"] == {} for w in roster.json()["result"]["workers"])


def test_a_valid_surrogate_pair_and_escaped_backslashes_pass(
    new_worker: Callable[[], HubClient],
) -> None:
    worker = new_worker()
    text = "emoji \U0001f600 and a literal \\u0000 written out"
    made = worker.call("POST", "/v1/entries", json={"type": "FACT", "body": text})
    assert made["result"]["entry"]["body"] == text


def test_registering_with_nul_in_the_model_is_refused(
    hub: BackgroundHub, operator: HubClient
) -> None:
    response = httpx.post(
        hub.url + "/v1/workers",
        content=b'{"model": "gpt\\u0000"}',
        headers={"Authorization": f"Bearer {operator.token}", "content-type": "application/json"},
    )
    assert response.status_code == 422
    assert hub.runtime.registry.count() == 0


def test_nul_in_a_query_is_refused(hub: BackgroundHub, new_worker: Callable[[], HubClient]) -> None:
    worker = new_worker()
    response = httpx.get(hub.url + "/v1/grep?pattern=a%00b", headers=_auth(worker))
    assert response.status_code == 422 and "NUL" in response.json()["error"]


def test_a_large_status_is_refused(hub: BackgroundHub, new_worker: Callable[[], HubClient]) -> None:
    worker = new_worker()
    limit = hub.runtime.settings.status_limit_bytes
    response = httpx.post(
        hub.url + "/v1/status",
        json={"state": "idle", "status": {"note": "x" * limit}},
        headers=_auth(worker),
    )
    assert response.status_code == 422 and "SWARM_STATUS_LIMIT_BYTES" in response.json()["error"]
    worker.call("POST", "/v1/status", json={"state": "idle", "status": {"note": "ok"}})


def _raw_request(hub: BackgroundHub, head: bytes, body: bytes) -> tuple[bytes, float]:
    """Send the head and a little of the body, then wait for the answer: seconds to get it."""
    with socket.create_connection((hub.host, hub.port), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(head + body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer, time.monotonic() - started


def test_a_body_over_the_limit_is_refused_before_it_is_read(
    hub: BackgroundHub, new_worker: Callable[[], HubClient]
) -> None:
    worker = new_worker()
    declared = 200 * 1024**2  # 200 MB announced; only 1 KB ever sent
    head = (
        f"POST /v1/entries HTTP/1.1\r\nHost: {hub.host}\r\nAuthorization: Bearer {worker.token}"
        f"\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
    ).encode()
    answer, seconds = _raw_request(hub, head, b"{" + b" " * 1023)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert seconds < 5
    assert hub.runtime.context.head() == 0


def test_a_chunked_body_is_cut_off_at_the_limit(
    hub: BackgroundHub, new_worker: Callable[[], HubClient]
) -> None:
    worker = new_worker()
    limit = hub.runtime.settings.max_body_bytes

    def chunks() -> object:
        yield b'{"type": "FACT", "body": "'
        for _ in range(limit // 65536 + 2):
            yield b"x" * 65536
        yield b'"}'

    response = httpx.post(
        hub.url + "/v1/entries",
        content=chunks(),  # type: ignore[arg-type]
        headers={**_auth(worker), "content-type": "application/json"},
    )
    assert response.status_code == 413 and "at most" in response.json()["error"]
    assert hub.runtime.context.head() == 0
