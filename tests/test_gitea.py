"""The Gitea adapter against canned answers (each validated against Gitea's spec)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from contract.spec import SpecCheck, gitea_spec, mock
from standins.gitea import GiteaStandin
from standins.serve import loopback

from swarm.errors import Conflict, Forbidden, MergeConflict, NotFound, Unavailable
from swarm.registry import Worker
from swarm.workspace.gitea import GiteaWorkspace
from swarm.workspace.gitea_client import GiteaClient, TokenBucket

W1, W2 = Worker(1, "w1"), Worker(2, "w2")
TOKEN = "admin-token-0123456789"


def pr_json(number: int = 7, **over: object) -> dict[str, object]:
    raw: dict[str, object] = {
        "number": number,
        "title": "t",
        "body": "",
        "user": {"login": "w1"},
        "state": "open",
        "merged": False,
        "mergeable": True,
        "created_at": "2026-01-01T00:00:00Z",
        "merge_base": "b" * 40,
        "head": {"ref": "w1/x", "sha": "a" * 40},
        "base": {"ref": "main", "sha": "c" * 40},
    }
    return raw | over


def workspace(handler: Callable[[httpx.Request], httpx.Response]) -> GiteaWorkspace:
    ws = GiteaWorkspace(
        "http://gitea.test", TOKEN, "swarm", "task",
        transport=mock(handler, SpecCheck(gitea_spec())), merge_wait=0.001,
    )  # fmt: skip
    ws._known_users.update({"w1", "w2"})  # accounts exist: these tests are about PRs
    return ws


def test_merge_retries_when_main_moved_and_sends_the_head_it_saw() -> None:
    merges: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/merge"):
            merges.append(__import__("json").loads(request.content))
            if len(merges) == 1:
                return httpx.Response(409, json={"message": "merge push out of date"})
            return httpx.Response(200)
        merged = len(merges) == 2
        return httpx.Response(
            200, json=pr_json(merged=merged, state="closed" if merged else "open")
        )

    pr = workspace(handler).merge(W1, 7)
    assert pr.state == "merged" and len(merges) == 2
    assert merges[0]["head_commit_id"] == "a" * 40 and merges[0]["do"] == "merge"


def test_unmergeable_pull_request_is_a_merge_conflict_naming_the_files() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/merge"):
            return httpx.Response(405, json={"message": "Please try again later"})
        if path.endswith("/files"):
            files = [{"filename": "a.py"}, {"filename": "b.py"}]
            return httpx.Response(200, json=files, headers={"X-Total-Count": "2"})
        if "/compare/" in path:
            commit = {"sha": "d" * 40, "files": [{"filename": "b.py"}]}
            return httpx.Response(200, json={"commits": [commit], "total_commits": 1})
        return httpx.Response(200, json=pr_json(mergeable=False))

    with pytest.raises(MergeConflict) as refused:
        workspace(handler).merge(W1, 7)
    assert refused.value.files == ["b.py"]


def test_self_approval_is_forbidden() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"message": "approve your own pull is not allowed"})

    with pytest.raises(Forbidden):
        workspace(handler).review(W1, 7, "approve", "lgtm")


def test_errors_are_translated_at_the_boundary() -> None:
    with pytest.raises(NotFound):
        workspace(lambda r: httpx.Response(404, json={"message": "nope"})).get_pr(9)
    with pytest.raises(Unavailable):
        workspace(lambda r: httpx.Response(500, json={"message": "boom"})).list_prs()

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(Unavailable, match="cannot reach Gitea"):
        workspace(down).main_head()


def test_merging_a_merged_pull_request_is_a_conflict() -> None:
    ws = workspace(lambda r: httpx.Response(200, json=pr_json(merged=True, state="closed")))
    with pytest.raises(Conflict):
        ws.merge(W1, 7)


def test_listing_follows_pages_until_the_total() -> None:
    pages: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        page = int(request.url.params["page"])
        pages.append(request.url.params["limit"])
        start = 120 - (page - 1) * 50
        items = [pr_json(n) for n in range(start, max(start - 50, 0), -1)]
        return httpx.Response(200, json=items, headers={"X-Total-Count": "120"})

    prs = workspace(handler).list_prs(limit=1000)
    assert [p.number for p in prs] == list(range(120, 0, -1)) and len(pages) == 3


def test_clone_url_carries_the_workers_own_credentials() -> None:
    ws = workspace(lambda r: httpx.Response(200, json={}))
    url = ws.clone_url(W2)
    assert url == f"http://w2:{ws.password('w2')}@gitea.test/swarm/task.git"
    assert ws.password("w2") != ws.password("w1")


def test_token_bucket_throttles_past_the_burst() -> None:
    now = [0.0]
    slept: list[float] = []
    bucket = TokenBucket(10, 2, clock=lambda: now[0], sleep=slept.append)
    for _ in range(4):
        bucket.take()
    assert slept == pytest.approx([0.1, 0.2])


def test_admin_bootstrap_over_loopback(tmp_path: Path) -> None:
    """The stand-in served by uvicorn: users, a token by basic auth, org, repo, protection."""
    standin = GiteaStandin(tmp_path, admin_token=TOKEN)
    with loopback(standin.app) as url:
        ws = GiteaWorkspace(url, TOKEN, "swarm", "task")
        ws.setup()
        ws.setup()  # idempotent
        ws.ensure_worker(W1)
        token = GiteaClient(url, TOKEN).create_token("w1", ws.password("w1"), "w1-token")
        assert standin.tokens[token] == "w1"
        assert standin.protections["swarm/task"][0]["enable_push"] is False
        assert standin.collaborators["swarm/task"] == {"w1"}
        started = time.perf_counter()
        for _ in range(20):
            ws.client.user_exists("w1")
        assert (time.perf_counter() - started) / 20 < 0.5
