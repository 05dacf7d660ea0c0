"""Per-worker rate limits on the expensive calls: a token bucket per worker, 429 with
Retry-After and a message saying what to do (issue "The hub's trust rules")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import FakeClock, make_runtime

from swarm.db import Database
from swarm.hub.limits import TokenBuckets
from swarm.hub.server import BackgroundHub
from swarm.tools.client import HubClient, HubError


def test_a_bucket_lets_a_burst_through_then_refills_at_its_rate() -> None:
    clock = FakeClock(0.0)
    buckets = TokenBuckets(per_minute=60, burst=3, clock=clock)
    assert [buckets.take("w1") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("w1") == pytest.approx(1.0)
    assert buckets.take("w2") == 0.0  # another worker has its own bucket
    clock.advance(1.0)
    assert buckets.take("w1") == 0.0
    assert TokenBuckets(per_minute=0, burst=1, clock=clock).take("w1") == 0.0  # 0: no limit


@pytest.fixture
def slow_hub(db: Database, tmp_path: Path) -> Iterator[BackgroundHub]:
    runtime = make_runtime(
        db, tmp_path, rate_grep_per_minute=6, rate_feed_per_minute=6, rate_burst=2
    )
    with BackgroundHub(runtime) as hub:
        yield hub


def _token(hub: BackgroundHub) -> str:
    with HubClient(hub.url, hub.runtime.operator_token) as operator:
        return str(operator.register()["token"])


@pytest.mark.parametrize("path", ["/v1/grep?pattern=x", "/v1/feed"])
def test_flooding_an_expensive_call_is_answered_429(slow_hub: BackgroundHub, path: str) -> None:
    flooder, peer = _token(slow_hub), _token(slow_hub)

    def call(token: str) -> httpx.Response:
        return httpx.get(slow_hub.url + path, headers={"Authorization": f"Bearer {token}"})

    assert [call(flooder).status_code for _ in range(2)] == [200, 200]
    refused = call(flooder)
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    body = refused.json()
    assert body["kind"] == "RateLimited" and "try again in" in body["error"]
    assert "_PER_MINUTE" in body["error"]
    assert call(peer).status_code == 200  # the peer's bucket is its own
    operator = httpx.get(
        slow_hub.url + path.replace("/v1/feed", "/v1/grep?pattern=x"),
        headers={"Authorization": f"Bearer {slow_hub.runtime.operator_token}"},
    )
    assert operator.status_code == 200  # people are not limited


def test_the_client_waits_out_a_rate_limit_as_the_hub_says(slow_hub: BackgroundHub) -> None:
    waits: list[float] = []
    with HubClient(
        slow_hub.url, _token(slow_hub), retry_for=30, on_wait=lambda _e, s: waits.append(s)
    ) as client:
        for _ in range(3):  # a burst of 2, then one a 10 s: the third call waits, then succeeds
            assert client.call("GET", "/v1/grep", params={"pattern": "x"})["result"] is not None
    assert len(waits) == 1 and 9.0 <= waits[0] <= 11.0, waits


def test_a_rate_limit_longer_than_the_retry_time_is_an_error_at_once(
    slow_hub: BackgroundHub,
) -> None:
    with HubClient(slow_hub.url, _token(slow_hub), retry_for=2) as client:
        client.call("GET", "/v1/feed")
        client.call("GET", "/v1/feed")
        with pytest.raises(HubError) as refused:
            client.call("GET", "/v1/feed")
    assert refused.value.status == 429 and refused.value.retry_after is not None
    assert "try again in" in refused.value.message
