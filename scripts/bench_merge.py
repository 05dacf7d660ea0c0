"""Merges per second of non-conflicting PRs: through the hub over HTTP, at the library level
(batched merge queue vs one merge per compare-and-swap), and a naive working-tree merge.

    .venv/bin/python scripts/bench_merge.py [--quick] [--json] [--prs N] [--workers 16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pygit2

from swarm.db import Database
from swarm.hub.server import HubProcess
from swarm.registry import Registry, Worker
from swarm.workspace.local import LocalWorkspace

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@swarm.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@swarm.invalid",
}


def seed_dir(root: Path) -> Path:
    seed = root / "seed"
    (seed / "src").mkdir(parents=True)
    for i in range(50):
        (seed / "src" / f"module_{i}.py").write_text(f"VALUE_{i} = {i}\n" * 20)
    return seed


def make_branches(git_dir: Path, names: list[str]) -> None:
    """One commit per branch adding its own file, written straight into the repository."""
    repo = pygit2.Repository(str(git_dir))
    main = repo.revparse_single("main").peel(pygit2.Commit)
    signature = pygit2.Signature("bench", "bench@swarm.invalid")
    for n, name in enumerate(names):
        builder = repo.TreeBuilder(main.tree)
        builder.insert(f"pr_{n}.txt", repo.create_blob(f"{n}\n".encode()), pygit2.GIT_FILEMODE_BLOB)
        tree = builder.write()
        repo.create_commit(f"refs/heads/{name}", signature, signature, name, tree, [main.id])


def setup(root: Path, prs: int, workers: int) -> tuple[LocalWorkspace, Database, list[Worker]]:
    db = Database(f"sqlite:///{root / 'hub.db'}")
    db.create_schema()
    registry = Registry(db)
    crew = [registry.register()[0] for _ in range(workers)]
    ws = LocalWorkspace.create(root / "workspace.git", seed_dir(root), db)
    names = [f"{crew[n % workers].name}/pr{n}" for n in range(prs)]
    make_branches(ws.path, names)
    for n, name in enumerate(names):
        ws.open_pr(crew[n % workers], name, f"PR {n}", "bench")
    return ws, db, crew


def concurrently(workers: int, prs: int, merge: Callable[[int, int], None]) -> float:
    """Each of `workers` threads merges its share of PRs 1..prs; answers merges per second."""
    barrier = threading.Barrier(workers + 1)

    def run(w: int) -> None:
        barrier.wait()
        for number in range(w + 1, prs + 1, workers):
            merge(w, number)

    with ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(run, w) for w in range(workers)]
        barrier.wait()
        start = time.perf_counter()
        for future in futures:
            future.result()
    return prs / (time.perf_counter() - start)


def bench_library(prs: int, workers: int, batch: bool) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="bench-merge-") as tmp:
        ws, db, crew = setup(Path(tmp), prs, workers)
        ws.shutdown()
        ws = LocalWorkspace(ws.path, db, batch=batch)
        rate = concurrently(workers, prs, lambda w, n: _merged(ws.merge(crew[w], n).state))
        batches = ws.queue.stats.batches
        ws.shutdown()
        db.dispose()
        return rate, batches


def _merged(state: str) -> None:
    if state != "merged":
        raise RuntimeError(f"a merge ended {state}")


def bench_http(prs: int, workers: int) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-merge-http-") as tmp:
        root = Path(tmp)
        db = Database(f"sqlite:///{root / 'hub.db'}")
        db.create_schema()
        registry = Registry(db)
        tokens = [registry.register()[1] for _ in range(workers)]
        crew = [registry.authenticate(t) for t in tokens]
        ws = LocalWorkspace.create(root / "workspace.git", seed_dir(root), db)
        names = [f"{crew[n % workers].name}/pr{n}" for n in range(prs)]
        make_branches(ws.path, names)
        for n, name in enumerate(names):
            ws.open_pr(crew[n % workers], name, f"PR {n}", "bench")
        ws.shutdown()
        db.dispose()
        with HubProcess(root) as hub:
            clients = [
                httpx.Client(
                    base_url=hub.url, headers={"Authorization": f"Bearer {t}"}, timeout=120
                )
                for t in tokens
            ]

            def merge(w: int, number: int) -> None:
                answer = clients[w].post(f"/v1/prs/{number}/merge")
                if answer.status_code != 200:
                    raise RuntimeError(f"merge #{number}: {answer.status_code} {answer.text}")

            rate = concurrently(workers, prs, merge)
            for client in clients:
                client.close()
        return rate


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True)


def bench_naive(prs: int) -> float:
    """The usual way: a working tree per merge — fetch, `git merge --no-ff`, `git push`."""
    with tempfile.TemporaryDirectory(prefix="bench-merge-naive-") as tmp:
        root = Path(tmp)
        bare = root / "plain.git"
        git(root, "init", "-q", "--bare", "--initial-branch=main", str(bare))
        repo = pygit2.Repository(str(bare))
        signature = pygit2.Signature("bench", "bench@swarm.invalid")
        builder = repo.TreeBuilder()
        builder.insert("README", repo.create_blob(b"x\n"), pygit2.GIT_FILEMODE_BLOB)
        repo.create_commit("refs/heads/main", signature, signature, "init", builder.write(), [])
        names = [f"w{n % 16}/pr{n}" for n in range(prs)]
        make_branches(bare, names)
        git(root, "clone", "-q", str(bare), "work")
        work = root / "work"
        start = time.perf_counter()
        for n, name in enumerate(names):
            git(work, "fetch", "-q", "origin", name)
            git(work, "merge", "-q", "--no-ff", "-m", f"Merge PR #{n + 1}", "FETCH_HEAD")
            git(work, "push", "-q", "origin", "HEAD:main")
        return prs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Fewer PRs: done within a minute.")
    parser.add_argument("--json", action="store_true", help="One JSON object per figure.")
    parser.add_argument("--prs", type=int, help="PRs merged per measurement.")
    parser.add_argument("--workers", type=int, default=16, help="Threads merging at once.")
    args = parser.parse_args()
    prs = args.prs or (256 if args.quick else 1024)
    naive_prs = max(20, prs // 16)
    w = args.workers

    http = bench_http(prs, w)
    batched, batches = bench_library(prs, w, batch=True)
    single, _ = bench_library(prs, w, batch=False)
    naive = bench_naive(naive_prs)
    figures = [
        ("http_merges_per_s", http, "merges/s", f"{prs} PRs, {w} workers over HTTP, hub process"),
        ("library_batched_merges_per_s", batched, "merges/s",
         f"{prs} PRs, {w} threads, merge queue ({batches} batches)"),
        ("library_single_merges_per_s", single, "merges/s",
         f"{prs} PRs, {w} threads, one merge per compare-and-swap"),
        ("naive_merges_per_s", naive, "merges/s",
         f"{naive_prs} PRs, working tree: fetch + git merge + git push"),
        ("http_vs_naive", http / naive, "x", "target: at least 3x"),
        ("batched_vs_single", batched / single, "x", "library level"),
    ]  # fmt: skip
    if args.json:
        for name, value, unit, _ in figures:
            print(json.dumps({"figure": name, "value": round(value, 2), "unit": unit}))
        return
    print(f"{'figure':32} {'value':>10}  unit      note")
    for name, value, unit, note in figures:
        print(f"{name:32} {value:10.1f}  {unit:9} {note}")
    if http < 100 or http / naive < 3:
        print("below target (100 merges/s over HTTP and 3x naive)", file=sys.stderr)


if __name__ == "__main__":
    main()
