"""The dashboard's JSON against a hub populated through the real API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from test_dashboard_support import populate, serve_run

from swarm.hub.server import BackgroundHub


@pytest.fixture
def run_hub(tmp_path: Path) -> Iterator[BackgroundHub]:
    yield from serve_run(tmp_path)


def get(hub: BackgroundHub, path: str, token: str | None = None, **params: object) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = httpx.get(f"{hub.url}/dashboard/api{path}", params=params, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_overview_counts_what_the_swarm_did(run_hub: BackgroundHub, tmp_path: Path) -> None:
    pop = populate(run_hub, tmp_path)
    d = get(run_hub, "/overview")
    assert [w["name"] for w in d["workers"]] == pop.workers
    states = {w["name"]: w["state"] for w in d["workers"]}
    assert states[pop.workers[0]] == "in_session" and states[pop.workers[1]] == "idle"
    current = [w["claim"]["scope"] if w["claim"] else None for w in d["workers"]]
    assert current == [None, ["src/parser/errors.py"], ["src/**"], None]
    assert [(c["time"], c["passed"], c["total"]) for c in d["checkpoints"]] == pop.checkpoints
    assert sum(d["entries"].values()) == pop.entries
    assert d["claims"]["active"] == 2 and d["claims"]["overlapping"] == 2
    assert d["entries"]["CLAIM"] == 4 and d["entries"]["PATCH_SUMMARY"] == 1
    assert d["claims"]["completed"] == 1 and d["claims"]["failed"] == 1
    assert d["prs"] == {"open": 1, "merged": 1, "closed": 0, "conflicted": 1}
    assert d["messages"]["channel"] == 1 and d["messages"]["direct"] >= 3  # 2 DMs + hub's
    assert d["run"]["task"] == "demo" and 3000 < d["run"]["time_left"] <= 3600 - 100
    assert d["totals"]["running"] == 1


def test_browsers_page_filter_and_grep(run_hub: BackgroundHub, tmp_path: Path) -> None:
    pop = populate(run_hub, tmp_path)
    page = get(run_hub, "/entries", limit=3)
    assert len(page["entries"]) == 3 and page["next"] == page["entries"][-1]["id"]
    older = get(run_hub, "/entries", limit=3, before=page["next"])
    assert older["entries"][0]["id"] < page["next"]
    facts = get(run_hub, "/entries", type="FACT")["entries"]
    assert [e["id"] for e in facts] == [pop.needle_entry]
    mine = get(run_hub, "/entries", author=pop.workers[2])["entries"]
    assert mine and {e["author"] for e in mine} == {pop.workers[2]}
    assert get(run_hub, "/entries", author="nobody")["entries"] == []
    found = get(run_hub, "/grep", pattern="ZEBRA-stripes")["entries"]
    assert [e["id"] for e in found] == [pop.needle_entry]
    claims = get(run_hub, "/claims")
    board = {c["owner"]: c for c in claims["active"]}
    assert sorted(board) == sorted(pop.workers[1:3])  # w1's claim completed, w2's docs failed
    assert board[pop.workers[1]]["overlaps"] == [board[pop.workers[2]]["id"]]
    assert [c["state"] for c in claims["claims"]] == ["active", "failed", "active", "completed"]
    prs = get(run_hub, "/prs")["prs"]
    assert [p["state"] for p in prs] == ["open", "merged"] and prs[0]["conflicts"] == 1
    detail = get(run_hub, f"/prs/{pop.merged_prs[0]}")
    assert "+def lex(text):" in detail["diff"] and detail["reviews"][0]["verdict"] == "approve"
    assert [e["kind"] for e in detail["events"]] == ["opened", "reviewed", "merged"]
    threads = get(run_hub, "/threads")["threads"]
    pair = sorted(pop.workers[:2])
    assert any([t["a"], t["b"]] == pair and t["count"] == 2 for t in threads)
    assert any("hub" in (t["a"], t["b"]) for t in threads)
    thread = get(run_hub, "/thread", a=pop.workers[0], b=pop.workers[1])["messages"]
    assert [m["body"] for m in thread] == ["Deal.", "I take the lexer, you take errors?"]
    tasks = get(run_hub, "/channel")["messages"]
    assert tasks[0]["body"].startswith("heads-up")
    timeline = get(run_hub, f"/workers/{pop.workers[0]}")
    kinds = {i["kind"] for i in timeline["items"]}
    assert kinds == {"session", "entry", "message", "pr"}


def test_viewer_token_guards_reading(
    run_hub: BackgroundHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pop = populate(run_hub, tmp_path, n=3)
    monkeypatch.setenv("SWARM_VIEWER_TOKEN", "view-secret-123456")
    url = f"{run_hub.url}/dashboard/api/overview"
    assert httpx.get(url).status_code == 401
    for token in ("view-secret-123456", run_hub.runtime.operator_token, pop.tokens[pop.workers[0]]):
        assert httpx.get(url, headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert httpx.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    roles = get(run_hub, "/session", token=run_hub.runtime.operator_token)
    assert roles["role"] == "operator" and roles["open"] is False
    page = httpx.get(f"{run_hub.url}/dashboard")
    assert page.status_code == 200 and "/dashboard/static/app.js" in page.text
    monkeypatch.delenv("SWARM_VIEWER_TOKEN")
    assert httpx.get(url).status_code == 200  # loopback reads freely without a viewer token
