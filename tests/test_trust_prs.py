"""Who may do what to a pull request, and who may read a DM, through the real hub on both
engines (issue "The hub's trust rules"). The adapters' rules themselves are in the workspace
contract (tests/contract/workspace.py), run against the embedded workspace and Gitea."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from conftest import make_runtime
from test_workspace_support import make_branch

from swarm.db import Database
from swarm.hub.server import BackgroundHub
from swarm.tools.client import HubClient, HubError


@pytest.fixture
def strict_hub(db: Database, tmp_path: Path) -> Iterator[BackgroundHub]:
    """A hub whose runs need one approval per merge."""
    runtime = make_runtime(db, tmp_path, required_approvals=1)
    with BackgroundHub(runtime) as server:
        yield server


def _worker(hub: BackgroundHub) -> tuple[HubClient, str]:
    with HubClient(hub.url, hub.runtime.operator_token) as operator:
        token = operator.register()["token"]
    client = HubClient(hub.url, token)
    return client, client.call("GET", "/v1/whoami")["result"]["name"]


def _git_dir(hub: BackgroundHub) -> Path:
    return hub.runtime.settings.run_dir / "workspace.git"


def test_a_push_after_the_approval_does_not_merge(strict_hub: BackgroundHub) -> None:
    (w1, n1), (w2, _n2) = _worker(strict_hub), _worker(strict_hub)
    branch = f"{n1}/harmless"
    make_branch(_git_dir(strict_hub), branch, {"ok.txt": "harmless\n"})
    number = w1.call("POST", "/v1/prs", json={"branch": branch, "title": "harmless"})["result"][
        "pr"
    ]["number"]
    w2.call("POST", f"/v1/prs/{number}/reviews", json={"verdict": "approve"})
    make_branch(_git_dir(strict_hub), branch, {"evil.txt": "something else\n"}, base=branch)
    with pytest.raises(HubError, match="approvals") as refused:
        w1.call("POST", f"/v1/prs/{number}/merge")
    assert refused.value.status == 409
    shown = w1.call("GET", f"/v1/prs/{number}")["result"]["pr"]
    assert shown["state"] == "open" and shown["approvals"] == 0
    w2.call("POST", f"/v1/prs/{number}/reviews", json={"verdict": "approve"})
    assert w1.call("POST", f"/v1/prs/{number}/merge")["result"]["pr"]["state"] == "merged"


def test_nobody_opens_a_pr_on_anothers_branch(strict_hub: BackgroundHub) -> None:
    (w1, n1), (w2, _n2) = _worker(strict_hub), _worker(strict_hub)
    branch = f"{n1}/work"
    make_branch(_git_dir(strict_hub), branch, {"w.txt": "w\n"})
    with pytest.raises(HubError, match="not your branch") as refused:
        w2.call("POST", "/v1/prs", json={"branch": branch, "title": "hijack"})
    assert refused.value.status == 403
    # w1's own `sw pr open` is not blocked, and w1 cannot approve its own branch's PR.
    number = w1.call("POST", "/v1/prs", json={"branch": branch, "title": "mine"})["result"]["pr"][
        "number"
    ]
    with pytest.raises(HubError, match="own PR"):
        w1.call("POST", f"/v1/prs/{number}/reviews", json={"verdict": "approve"})


@pytest.mark.parametrize("branch", ["NAME/a..b", "NAME/x.lock", "NAME/sp ace", "NAME/t~1", "NAME/"])
def test_branch_names_follow_check_ref_format(strict_hub: BackgroundHub, branch: str) -> None:
    w1, n1 = _worker(strict_hub)
    with pytest.raises(HubError, match="branch") as refused:
        w1.call("POST", "/v1/prs", json={"branch": branch.replace("NAME", n1), "title": "t"})
    assert refused.value.status in (404, 422)


def test_closing_is_for_the_author_or_the_operator(strict_hub: BackgroundHub) -> None:
    (w1, n1), (w2, _n2) = _worker(strict_hub), _worker(strict_hub)
    make_branch(_git_dir(strict_hub), f"{n1}/c", {"c.txt": "c\n"})
    number = w1.call("POST", "/v1/prs", json={"branch": f"{n1}/c", "title": "c"})["result"]["pr"][
        "number"
    ]
    with pytest.raises(HubError, match="only its author") as refused:
        w2.call("POST", f"/v1/prs/{number}/close")
    assert refused.value.status == 403
    with HubClient(strict_hub.url, strict_hub.runtime.operator_token) as operator:
        closed = operator.call("POST", f"/v1/prs/{number}/close")["result"]["pr"]
    assert closed["state"] == "closed"


def test_requested_changes_block_until_the_operator_overrides(strict_hub: BackgroundHub) -> None:
    (w1, n1), (w2, _n2), (w3, _n3) = _worker(strict_hub), _worker(strict_hub), _worker(strict_hub)
    make_branch(_git_dir(strict_hub), f"{n1}/rc", {"rc.txt": "rc\n"})
    number = w1.call("POST", "/v1/prs", json={"branch": f"{n1}/rc", "title": "rc"})["result"]["pr"][
        "number"
    ]
    w2.call("POST", f"/v1/prs/{number}/reviews", json={"verdict": "approve"})
    w3.call("POST", f"/v1/prs/{number}/reviews", json={"verdict": "request_changes", "body": "no"})
    with pytest.raises(HubError, match="requested changes"):
        w2.call("POST", f"/v1/prs/{number}/merge")  # any worker may merge, not past this
    with HubClient(strict_hub.url, strict_hub.runtime.operator_token) as operator:
        merged = operator.call("POST", f"/v1/prs/{number}/merge")["result"]["pr"]
    assert merged["state"] == "merged" and merged["merged_by"] == "operator"


def test_dms_are_read_by_their_two_parties_and_the_operator(
    hub: BackgroundHub, new_worker: Callable[[], HubClient], operator: HubClient
) -> None:
    a, b, c = new_worker(), new_worker(), new_worker()
    b_name = b.call("GET", "/v1/whoami")["result"]["name"]
    a.call("POST", "/v1/dm", json={"to": b_name, "body": "the secret plan"})
    with pytest.raises(HubError, match="only") as refused:
        c.call("GET", "/v1/messages", params={"worker": b_name})
    assert refused.value.status == 403
    mine = b.call("GET", "/v1/messages", params={"worker": b_name})["result"]["messages"]
    assert [m["body"] for m in mine] == ["the secret plan"]
    seen = operator.call("GET", "/v1/messages", params={"worker": b_name})["result"]["messages"]
    assert [m["body"] for m in seen] == ["the secret plan"]


def test_a_workers_token_does_not_open_dm_threads_in_the_dashboard(
    hub: BackgroundHub, new_worker: Callable[[], HubClient]
) -> None:
    a, b = new_worker(), new_worker()
    names = [w.call("GET", "/v1/whoami")["result"]["name"] for w in (a, b)]
    a.call("POST", "/v1/dm", json={"to": names[1], "body": "private"})
    for path in ("/dashboard/api/threads", f"/dashboard/api/thread?a={names[0]}&b={names[1]}"):
        answer = httpx.get(hub.url + path, headers={"Authorization": f"Bearer {a.token}"})
        assert answer.status_code == 403 and "private" not in answer.text


def test_the_loopback_exemption_needs_the_hubs_own_host_name(hub: BackgroundHub) -> None:
    rebinding = httpx.get(
        hub.url + "/dashboard/api/overview", headers={"Host": f"attacker.example:{hub.port}"}
    )
    assert rebinding.status_code == 401
    for name in ("127.0.0.1", "localhost"):
        own = httpx.get(hub.url + "/dashboard/api/overview", headers={"Host": f"{name}:{hub.port}"})
        assert own.status_code == 200, name


def test_the_dashboard_page_cannot_be_framed(hub: BackgroundHub) -> None:
    page = httpx.get(hub.url + "/dashboard")
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"


def test_an_abandoned_pr_may_be_closed_by_whoever_takes_it_over(
    strict_hub: BackgroundHub,
) -> None:
    from sqlalchemy import insert

    from swarm.workspace.schema import pr_events

    (w1, n1), (w2, _n2) = _worker(strict_hub), _worker(strict_hub)
    make_branch(_git_dir(strict_hub), f"{n1}/gone", {"g.txt": "g\n"})
    number = w1.call("POST", "/v1/prs", json={"branch": f"{n1}/gone", "title": "g"})["result"][
        "pr"
    ]["number"]
    with pytest.raises(HubError, match="only its author"):
        w2.call("POST", f"/v1/prs/{number}/close")
    with strict_hub.runtime.db.write() as conn:  # what swarm.hub.liveness records for the dead
        conn.execute(
            insert(pr_events).values(
                number=number, created_at=0.0, actor="hub", kind="abandoned", detail="dead"
            )
        )
    assert w2.call("POST", f"/v1/prs/{number}/close")["result"]["pr"]["state"] == "closed"
