"""Abandoned pull requests, through the real hub on both engines: a PR whose author gave up its
claim (or died) is marked abandoned by the hub's upkeep, and whoever claims its files takes it
over (`sw pr take`, or a PR of their own that supersedes it); the hub closes one main holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from swarm.hub.server import BackgroundHub
from swarm.tools.client import HubClient, HubError
from tests.faults.faultkit import wait_until
from tests.test_workspace_support import make_branch

SW = str(Path(sys.executable).parent / "sw")


def _worker(hub: BackgroundHub) -> tuple[HubClient, str]:
    with HubClient(hub.url, hub.runtime.operator_token) as operator:
        token = operator.register()["token"]
    client = HubClient(hub.url, token)
    return client, client.call("GET", "/v1/whoami")["result"]["name"]


def _git_dir(hub: BackgroundHub) -> Path:
    return hub.runtime.settings.run_dir / "workspace.git"


def _pr(client: HubClient, number: int) -> dict[str, Any]:
    return dict(client.call("GET", f"/v1/prs/{number}")["result"])


def _given_up(
    hub: BackgroundHub, w1: HubClient, name: str, files: dict[str, str], body: str = ""
) -> int:
    """w1 claims `files`, opens a PR changing them, and FAILs the claim: the PR is given up."""
    claim = w1.record("CLAIM", "the parser", scope=sorted(files))["result"]["entry"]["id"]
    make_branch(_git_dir(hub), f"{name}/parser", files)
    opened = w1.call(
        "POST", "/v1/prs", json={"branch": f"{name}/parser", "title": "parser", "body": body}
    )
    number = int(opened["result"]["pr"]["number"])
    w1.record("FAIL", "the merge check fails for good on this approach", refs=[claim])
    return number


def test_a_pr_given_up_is_abandoned_and_taken_over_by_whoever_claims_its_files(
    hub: BackgroundHub,
) -> None:
    (w1, n1), (w2, n2) = _worker(hub), _worker(hub)
    number = _given_up(hub, w1, n1, {"parser.py": "def parse(): ...\n"})
    # The hub's own upkeep thread marks it, within seconds.
    wait_until("the PR to be abandoned", lambda: _pr(w2, number)["pr"]["abandoned"], timeout=30)
    events = _pr(w2, number)["events"]
    assert any("abandoned" in e and "ended without a PATCH_SUMMARY" in e for e in events)
    with pytest.raises(HubError, match="claim PR") as unclaimed:
        w2.call("POST", f"/v1/prs/{number}/take")
    assert unclaimed.value.status == 403
    assert _pr(w2, number)["pr"]["state"] == "open"  # a refusal changes nothing
    w2.record("CLAIM", "take the parser over", scope=["parser.py"])
    taken = w2.call("POST", f"/v1/prs/{number}/take")["result"]
    new = taken["pr"]
    assert taken["took_over"] == number
    assert new["author"] == n2 and new["branch"] == f"{n2}/parser" and new["state"] == "open"
    assert new["head"] == _pr(w2, number)["pr"]["head"]  # the abandoned commits, as they were
    old = _pr(w2, number)
    assert old["pr"]["state"] == "closed"
    assert any(f"taken over by {n2} as #{new['number']}" in e for e in old["events"])
    assert any(f"took_over: #{number} by {n1}" in e for e in _pr(w2, new["number"])["events"])
    merged = w2.call("POST", f"/v1/prs/{new['number']}/merge")["result"]["pr"]
    assert merged["state"] == "merged"
    with pytest.raises(HubError, match="closed"):
        w2.call("POST", f"/v1/prs/{number}/take")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_sw_pr_take_prints_the_new_pr_and_how_to_continue(hub: BackgroundHub) -> None:
    (w1, n1), (w2, n2) = _worker(hub), _worker(hub)
    number = _given_up(hub, w1, n1, {"parser.py": "def parse(): ...\n"})
    wait_until("the PR to be abandoned", lambda: _pr(w2, number)["pr"]["abandoned"], timeout=30)
    listed = subprocess.run(
        [SW, "pr", "list", "--state", "open"],
        env={**os.environ, "SWARM_HUB_URL": hub.url, "SWARM_TOKEN": str(w2.token)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "[open, abandoned: claim its files, then sw pr take]" in listed.stdout
    w2.record("CLAIM", "take the parser over", scope=["parser.py"])
    done = subprocess.run(
        [SW, "pr", "take", str(number)],
        env={**os.environ, "SWARM_HUB_URL": hub.url, "SWARM_TOKEN": str(w2.token)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"took over #{number} as #")
    assert f"git fetch origin {n2}/parser && git checkout -B {n2}/parser FETCH_HEAD" in done.stdout


def test_a_pr_of_ones_own_supersedes_the_abandoned_one(hub: BackgroundHub) -> None:
    (w1, n1), (w2, n2) = _worker(hub), _worker(hub)
    number = _given_up(hub, w1, n1, {"parser.py": "def parse(): ...\n"})
    wait_until("the PR to be abandoned", lambda: _pr(w2, number)["pr"]["abandoned"], timeout=30)
    w2.record("CLAIM", "a parser, my way", scope=["parser.py"])
    make_branch(_git_dir(hub), f"{n2}/mine", {"parser.py": "def parse(text): return text\n"})
    opened = w2.call("POST", "/v1/prs", json={"branch": f"{n2}/mine", "title": "parser"})
    assert opened["result"]["superseded"] == [number]
    mine = opened["result"]["pr"]["number"]
    old = _pr(w2, number)
    assert old["pr"]["state"] == "closed"
    assert any(f"taken over by {n2} as #{mine}" in e for e in old["events"])


def test_a_pr_whose_author_still_works_on_it_is_not_abandoned(hub: BackgroundHub) -> None:
    (w1, n1), (w2, _n2) = _worker(hub), _worker(hub)
    w1.record("CLAIM", "the whole parser package", scope=["parser.py", "lexer.py"])
    number = _given_up(hub, w1, n1, {"parser.py": "def parse(): ...\n"})
    # Its author's other claim covers the PR's file: it works on it still.
    hub.runtime.workspace.sweep_abandoned()  # type: ignore[union-attr]
    assert not _pr(w2, number)["pr"]["abandoned"]
    w2.record("CLAIM", "I want the parser", scope=["parser.py"])
    with pytest.raises(HubError, match="not abandoned") as refused:
        w2.call("POST", f"/v1/prs/{number}/take")
    assert refused.value.status == 403
    with pytest.raises(HubError, match="only its author"):
        w2.call("POST", f"/v1/prs/{number}/close")
    with pytest.raises(HubError, match="yours already"):
        w1.call("POST", f"/v1/prs/{number}/take")


def test_an_abandoned_pr_that_main_already_holds_is_closed_by_the_hub(
    hub: BackgroundHub,
) -> None:
    (w1, n1), (w2, n2) = _worker(hub), _worker(hub)
    same = {"parser.py": "def parse(): ...\n"}
    number = _given_up(hub, w1, n1, same)
    wait_until("the PR to be abandoned", lambda: _pr(w2, number)["pr"]["abandoned"], timeout=30)
    # A peer did the same work without claiming it (so nothing superseded the abandoned PR).
    make_branch(_git_dir(hub), f"{n2}/same", same)
    peer = w2.call("POST", "/v1/prs", json={"branch": f"{n2}/same", "title": "parser too"})
    assert peer["result"]["superseded"] == []
    w2.call("POST", f"/v1/prs/{peer['result']['pr']['number']}/merge")
    wait_until("the hub to close it", lambda: _pr(w2, number)["pr"]["state"] == "closed", 30)
    assert any("main already holds its changes" in e for e in _pr(w2, number)["events"])


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_pr_with_the_longest_body_is_taken_over_with_what_fits(hub: BackgroundHub) -> None:
    from swarm.workspace.local import BODY_LIMIT

    (w1, n1), (w2, n2) = _worker(hub), _worker(hub)
    number = _given_up(hub, w1, n1, {"parser.py": "x = 1\n"}, body="b" * BODY_LIMIT)
    wait_until("the PR to be abandoned", lambda: _pr(w2, number)["pr"]["abandoned"], timeout=30)
    w2.record("CLAIM", "take the parser over", scope=["parser.py"])
    new = w2.call("POST", f"/v1/prs/{number}/take")["result"]["pr"]
    assert new["body"].startswith(f"Takes over #{number} by {n1} (abandoned).")
    assert len(new["body"]) == BODY_LIMIT and new["author"] == n2
