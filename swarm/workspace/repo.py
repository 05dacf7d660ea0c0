"""The bare repository of a run: created once with `main` seeded from a task's starting files."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pygit2

from swarm.workspace.git_http import install_hooks
from swarm.workspace.merge import COMMITTER, MAIN_REF

REPO_CONFIG = {
    "http.receivepack": "true",
    "receive.fsckObjects": "true",  # a crafted tree must never reach the merge check's checkout
    "uploadpack.allowFilter": "true",
    # No reflogs: nothing reads them (the record of merges is main's first-parent line and the
    # PR table), and a ref update that failed on a full disk still appended its entry (into the
    # log file's last page), pointing at a commit that was never written: `git fsck --strict`
    # then fails for good. git and libgit2 write a reflog whenever its file exists, so the
    # files go too (see `configure`).
    "core.logAllRefUpdates": "false",
}


def init_repo(path: Path, seed_dir: Path | None = None) -> bool:
    """Create the bare repository with `main` = the seed files; False when it already exists."""
    if (path / "HEAD").exists():
        configure(path)
        return False
    repo = pygit2.init_repository(str(path), bare=True, initial_head="main")
    configure(path)
    tree = _write_dir(repo, seed_dir) if seed_dir is not None else repo.TreeBuilder().write()
    signature = pygit2.Signature(*COMMITTER)
    repo.create_commit(MAIN_REF, signature, signature, "Initial commit\n", tree, [])
    return True


def configure(path: Path) -> None:
    """Apply the repository settings and hooks (again at every start, so upgrades take effect)."""
    config = pygit2.Repository(str(path)).config
    for key, value in REPO_CONFIG.items():
        config[key] = value
    # An absolute hooks path wins over any global core.hooksPath of the machine.
    config["core.hooksPath"] = str((path / "hooks").resolve())
    shutil.rmtree(path / "logs", ignore_errors=True)
    install_hooks(path)


def _write_dir(repo: pygit2.Repository, directory: Path) -> pygit2.Oid:
    builder = repo.TreeBuilder()
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.name == ".git":
            continue
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            blob = repo.create_blob(os.readlink(entry.path).encode())
            builder.insert(entry.name, blob, pygit2.GIT_FILEMODE_LINK)
        elif stat.S_ISDIR(mode):
            sub = _write_dir(repo, Path(entry.path))
            if len(repo[sub].peel(pygit2.Tree)):  # git keeps no empty directories
                builder.insert(entry.name, sub, pygit2.GIT_FILEMODE_TREE)
        elif stat.S_ISREG(mode):
            blob = repo.create_blob_fromdisk(entry.path)
            executable = mode & stat.S_IXUSR
            filemode = (
                pygit2.GIT_FILEMODE_BLOB_EXECUTABLE if executable else pygit2.GIT_FILEMODE_BLOB
            )
            builder.insert(entry.name, blob, filemode)
    return builder.write()
