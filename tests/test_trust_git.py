"""Git over the hub's smart HTTP: who may push, and the limits on what a push may bring
(issue "The hub's trust rules"). Refusals must be a readable line in git's own output."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import make_runtime
from test_workspace_support import Clone

from swarm.db import Database
from swarm.hub.server import BackgroundHub
from swarm.tools.client import HubClient


def _clone(hub: BackgroundHub, token: str, name: str, path: Path) -> Clone:
    header = f"http.extraHeader=Authorization: Bearer {token}"
    return Clone(f"{hub.url}/git/workspace.git", path, name, config=(header,))


def test_the_operator_token_never_pushes(hub: BackgroundHub, tmp_path: Path) -> None:
    clone = _clone(hub, hub.runtime.operator_token, "operator", tmp_path / "op")
    clone.write("x.txt", "x\n")
    clone.commit("the operator's change")
    out = clone.push("operator/sneaky", check=False)
    assert "never pushes" in out
    assert "operator/sneaky" not in clone.git("ls-remote", "origin")


def test_a_worker_still_pushes_its_own_branch(
    hub: BackgroundHub, new_worker: Callable[[], HubClient], tmp_path: Path
) -> None:
    worker = new_worker()
    name = worker.call("GET", "/v1/whoami")["result"]["name"]
    clone = _clone(hub, worker.token or "", name, tmp_path / "w")
    clone.write("x.txt", "x\n")
    clone.commit("a change")
    clone.push(f"{name}/topic")
    assert f"refs/heads/{name}/topic" in clone.git("ls-remote", "origin")


@pytest.fixture
def limited_hub(db: Database, tmp_path: Path) -> Iterator[Callable[..., BackgroundHub]]:
    """Starts a hub with the given settings (one per test)."""
    hubs: list[BackgroundHub] = []

    def start(**settings: object) -> BackgroundHub:
        hub = BackgroundHub(make_runtime(db, tmp_path, **settings)).start()
        hubs.append(hub)
        return hub

    yield start
    for hub in hubs:
        hub.stop()
        hub.runtime.close()


def _worker_clone(hub: BackgroundHub, path: Path) -> Clone:
    with HubClient(hub.url, hub.runtime.operator_token) as operator:
        token = operator.register()["token"]
    with HubClient(hub.url, token) as client:
        name = client.call("GET", "/v1/whoami")["result"]["name"]
    return _clone(hub, token, name, path)


def test_a_large_file_is_refused_with_a_readable_line(
    limited_hub: Callable[..., BackgroundHub], tmp_path: Path
) -> None:
    hub = limited_hub(git_max_blob_bytes=64 * 1024)
    clone = _worker_clone(hub, tmp_path / "w")
    clone.write("big.bin", "x" * (100 * 1024))
    clone.commit("a big file")
    out = clone.push(f"{clone.worker}/big", check=False)
    assert "big.bin" in out and "SWARM_GIT_MAX_BLOB_BYTES" in out, out
    assert f"{clone.worker}/big" not in clone.git("ls-remote", "origin")
    clone.git("reset", "-q", "--hard", "HEAD~1")
    clone.write("small.txt", "x" * 1000)
    clone.commit("a small file")
    clone.push(f"{clone.worker}/small")


def test_a_push_over_the_size_limit_is_refused(
    limited_hub: Callable[..., BackgroundHub], tmp_path: Path
) -> None:
    hub = limited_hub(git_max_push_bytes=1024**2, git_max_blob_bytes=8 * 1024**2)
    clone = _worker_clone(hub, tmp_path / "w")
    (clone.path / "noise.bin").write_bytes(os.urandom(3 * 1024**2))  # incompressible
    clone.commit("3 MiB of noise")
    out = clone.push(f"{clone.worker}/noise", check=False)
    assert "exceeds maximum allowed size" in out, out
    assert f"{clone.worker}/noise" not in clone.git("ls-remote", "origin")


def test_branches_per_worker_are_limited(
    limited_hub: Callable[..., BackgroundHub], tmp_path: Path
) -> None:
    hub = limited_hub(git_max_refs_per_worker=2)
    clone = _worker_clone(hub, tmp_path / "w")
    clone.write("a.txt", "a\n")
    clone.commit("a")
    clone.push(f"{clone.worker}/one")
    clone.push(f"{clone.worker}/two")
    out = clone.push(f"{clone.worker}/three", check=False)
    assert "SWARM_GIT_MAX_REFS_PER_WORKER" in out and "--delete" in out, out
    clone.git("push", "-q", "origin", "--delete", f"{clone.worker}/one")
    clone.push(f"{clone.worker}/three")


def test_the_repository_quota_refuses_pushes_past_it(
    limited_hub: Callable[..., BackgroundHub], tmp_path: Path
) -> None:
    hub = limited_hub(git_repo_quota_bytes=1024**2, git_max_blob_bytes=8 * 1024**2)
    clone = _worker_clone(hub, tmp_path / "w")
    (clone.path / "noise.bin").write_bytes(os.urandom(2 * 1024**2))
    clone.commit("2 MiB of noise")
    out = clone.push(f"{clone.worker}/noise", check=False)
    assert "SWARM_GIT_REPO_QUOTA_BYTES" in out, out


def test_git_operations_are_rate_limited_per_worker(
    limited_hub: Callable[..., BackgroundHub], tmp_path: Path
) -> None:
    hub = limited_hub(rate_git_per_minute=1, rate_burst=2)  # the clone is the first
    flooder = _worker_clone(hub, tmp_path / "a")
    flooder.git("ls-remote", "origin")
    out = flooder.git("ls-remote", "origin", check=False)
    assert "429" in out or "too many git operations" in out, out
    _worker_clone(hub, tmp_path / "b").git("ls-remote", "origin")  # a peer is not affected
