"""Helpers for the workspace tests: real git clones, branches written with pygit2, a workspace."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from swarm.db import Database
from swarm.registry import Registry, Worker
from swarm.workspace.local import LocalWorkspace

GIT_ENV = {
    "GIT_AUTHOR_NAME": "tester",
    "GIT_AUTHOR_EMAIL": "tester@swarm.invalid",
    "GIT_COMMITTER_NAME": "tester",
    "GIT_COMMITTER_EMAIL": "tester@swarm.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}


def git(cwd: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    """Run git; answers stdout and stderr together (refusals arrive on stderr)."""
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV, **(env or {})},
        capture_output=True,
        text=True,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stdout}{done.stderr}")
    return done.stdout + done.stderr


class Clone:
    """A worker's checkout. Over a file path, REMOTE_USER plays the part the hub plays."""

    def __init__(self, url: str, path: Path, worker: str, *, config: tuple[str, ...] = ()) -> None:
        self.path = path
        self.worker = worker
        self.env = {} if url.startswith("http") else {"REMOTE_USER": worker}
        options = [arg for item in config for arg in ("-c", item)]  # kept in the clone's config
        git(path.parent, "clone", "-q", *options, url, str(path))

    def write(self, name: str, text: str) -> None:
        (self.path / name).parent.mkdir(parents=True, exist_ok=True)
        (self.path / name).write_text(text)

    def commit(self, message: str) -> str:
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "-m", message)
        return git(self.path, "rev-parse", "HEAD").strip()

    def push(self, ref: str, check: bool = True) -> str:
        return git(self.path, "push", "origin", f"HEAD:{ref}", env=self.env, check=check)

    def git(self, *args: str, check: bool = True) -> str:
        return git(self.path, *args, env=self.env, check=check)


def make_branch(git_dir: Path, branch: str, files: dict[str, str], base: str = "main") -> str:
    """Write a commit on top of `base` straight into the repository (no hook, no push)."""
    repo = pygit2.Repository(str(git_dir))
    parent = repo.revparse_single(base).peel(pygit2.Commit)
    builder = repo.TreeBuilder(parent.tree)
    for name, text in files.items():
        builder.insert(name, repo.create_blob(text.encode()), pygit2.GIT_FILEMODE_BLOB)
    signature = pygit2.Signature("tester", "tester@swarm.invalid")
    oid = repo.create_commit(
        f"refs/heads/{branch}",
        signature,
        signature,
        f"change {branch}",
        builder.write(),
        [parent.id],
    )
    return str(oid)


def seed(tmp_path: Path) -> Path:
    directory = tmp_path / "seed"
    directory.mkdir()
    (directory / "README.md").write_text("# demo\n")
    (directory / "app.py").write_text("".join(f"line {i}\n" for i in range(10)))
    (directory / "bin").mkdir()
    (directory / "bin" / "run.sh").write_text("#!/bin/sh\necho run\n")
    (directory / "bin" / "run.sh").chmod(0o755)
    return directory


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'hub.db'}")
    database.create_schema()
    yield database
    database.dispose()


@pytest.fixture
def registry(sqlite_db: Database) -> Registry:
    return Registry(sqlite_db)


@pytest.fixture
def crew(registry: Registry) -> list[Worker]:
    return [registry.register()[0] for _ in range(3)]


def open_workspace(tmp_path: Path, db: Database, **options: object) -> LocalWorkspace:
    path = tmp_path / "run" / "workspace.git"
    seed_dir = seed(tmp_path) if not path.exists() else None
    return LocalWorkspace.create(path, seed_dir, db, **options)  # type: ignore[arg-type]


@pytest.fixture
def ws(tmp_path: Path, sqlite_db: Database) -> Iterator[LocalWorkspace]:
    workspace = open_workspace(tmp_path, sqlite_db)
    yield workspace
    workspace.shutdown()
