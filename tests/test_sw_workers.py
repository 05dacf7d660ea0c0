"""`sw workers`: an agent lists its peers (state, current claims, last seen) through the hub."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_sw_cli import sw

from swarm.hub.server import BackgroundHub
from swarm.tools.client import HubClient


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_sw_workers_lists_peers_with_state_claims_and_last_seen(
    hub: BackgroundHub, new_worker: Callable[[], HubClient]
) -> None:
    a, b, c = new_worker(), new_worker(), new_worker()
    a.report("in_session", {})
    b.report("idle", {})
    c.report("stopped", {})
    claimed = sw("claim", "lib.py::pluralize", "-m", "plural rules", token=a.token, url=hub.url)
    assert claimed.returncode == 0, claimed.stderr
    listed = sw("workers", token=b.token, url=hub.url)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == "3 workers, 2 alive:"
    assert lines[1].startswith("w1 in_session, last seen ")
    assert lines[1].endswith(", claim #1 [lib.py::pluralize]: plural rules")
    assert lines[2].startswith("w2 idle, last seen ") and lines[2].endswith(", no claim")
    assert lines[3].startswith("w3 stopped, ")
    # Like every sw call, it delivers what peers recorded since the caller's last call.
    assert "--- new from peers ---\n#1 CLAIM w1 [lib.py::pluralize]" in listed.stdout
    # The error that points at it now points at something that exists.
    unknown = sw("dm", "w99", "hello", token=b.token, url=hub.url)
    assert unknown.returncode == 1 and "`sw workers` lists them" in unknown.stdout + unknown.stderr
    assert "workers" in sw("--help", token=None, url=hub.url).stdout
