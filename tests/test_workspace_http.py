"""Git's smart HTTP through the hub's router: real uvicorn on loopback, real git clone and push."""

from __future__ import annotations

import gzip
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from test_workspace_support import Clone, git

from swarm.registry import Registry, Worker
from swarm.workspace.git_http import git_router, token_from_headers
from swarm.workspace.local import LocalWorkspace

pytest_plugins = ["test_workspace_support"]  # its fixtures: sqlite_db, registry, crew, ws


@pytest.fixture
def served(ws: LocalWorkspace, registry: Registry) -> Iterator[str]:
    """The workspace's git router alone on a loopback port; answers the repository URL."""
    app = FastAPI()
    app.include_router(git_router(ws, registry.authenticate))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}/git/workspace.git"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def people(registry: Registry) -> list[tuple[Worker, str]]:
    return [registry.register() for _ in range(2)]


def bearer(token: str) -> tuple[str, ...]:
    return (f"http.extraHeader=Authorization: Bearer {token}",)


def test_push_through_the_hub_enforces_namespaces(
    served: str, ws: LocalWorkspace, people: list[tuple[Worker, str]], tmp_path: Path
) -> None:
    (alice, token), (bob, _) = people
    clone = Clone(served, tmp_path / "a", alice.name, config=bearer(token))
    clone.write("new.txt", "hello\n")
    clone.commit("add new.txt")
    before = ws.main_head()
    refused_main = clone.push("main", check=False)
    assert "nobody pushes to main" in refused_main and "[remote rejected]" in refused_main
    refused_other = clone.push(f"{bob.name}/steal", check=False)
    assert "belongs to another worker" in refused_other
    assert "tags are not allowed" in clone.push("refs/tags/v1", check=False)
    assert ws.main_head() == before
    assert git(ws.path, "for-each-ref", f"refs/heads/{bob.name}", "refs/tags").strip() == ""

    clone.push(f"{alice.name}/new")
    ws.open_pr(alice, f"{alice.name}/new", "add new.txt", "")
    merged = ws.merge(bob, 1)
    clone.git("pull", "-q", "--no-rebase", "origin", "main")
    assert clone.git("rev-parse", "HEAD").strip() == merged.merge_commit


def test_basic_auth_password_is_the_token(
    served: str, people: list[tuple[Worker, str]], tmp_path: Path, ws: LocalWorkspace
) -> None:
    (_, _), (bob, token) = people
    url = served.replace("http://", f"http://{bob.name}:{token}@")
    clone = Clone(url, tmp_path / "b", bob.name)
    clone.write("big.bin", os.urandom(3 * 1024 * 1024).hex())  # > http.postBuffer: chunked
    clone.commit("a large push, streamed")
    clone.push(f"{bob.name}/big")
    assert git(ws.path, "cat-file", "-t", f"{bob.name}/big:big.bin").strip() == "blob"


def test_without_a_valid_token_git_is_refused(served: str, tmp_path: Path) -> None:
    output = git(tmp_path, "clone", served, str(tmp_path / "x"), check=False)
    assert "could not read Username" in output  # the 401 challenge asked for credentials
    bad = bearer("swt_not-a-token")[0]
    output = git(tmp_path, "clone", "-c", bad, served, str(tmp_path / "y"), check=False)
    assert "fatal" in output and not (tmp_path / "y" / ".git").exists()
    answer = httpx.get(f"{served}/info/refs?service=git-upload-pack")
    assert answer.status_code == 401 and "Basic" in answer.headers["www-authenticate"]
    answer = httpx.get(f"{served}/../hub.db", headers={"Authorization": "Bearer x"})
    assert answer.status_code in (401, 404)


def test_a_gzip_request_body_is_inflated(
    served: str, ws: LocalWorkspace, people: list[tuple[Worker, str]]
) -> None:
    (_, token), _ = people
    headers = {"Authorization": f"Bearer {token}"}
    want = f"want {ws.main_head()}\n"
    request = f"{len(want) + 4:04x}{want}0000" + "0009done\n"
    answer = httpx.post(
        f"{served}/git-upload-pack",
        content=gzip.compress(request.encode()),
        headers={
            **headers,
            "Content-Type": "application/x-git-upload-pack-request",
            "Content-Encoding": "gzip",
        },
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/x-git-upload-pack-result"
    assert b"PACK" in answer.content


def test_token_parsing() -> None:
    assert token_from_headers("Bearer abc") == "abc"
    assert token_from_headers("Basic dzE6c2VjcmV0") == "secret"  # w1:secret
    assert token_from_headers("Basic !!!") is None
    assert token_from_headers("Digest x") is None and token_from_headers(None) is None
