"""What the evaluator scores: a commit of a git repository (a path or URL), or a plain folder.

Each scoring gets a fresh copy (`copy_into`): the scored code never runs in a long-lived
checkout it could have written to. Commits come from a bare mirror of the evaluator's own
(fetched into, never run in); a folder is copied as it is, and its "commit" is a hash of its
files, so an unchanged folder is not scored again.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Protocol

from swarm.archive import extract_all
from swarm.errors import InvalidInput, NotFound, Unavailable

# Never part of a plain folder's copy: version control and caches of the folder's own runs.
SKIPPED_NAMES = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def _git_env() -> dict[str, str]:
    # Never prompt for credentials: an evaluator runs unattended.
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    env.pop("GIT_DIR", None)
    return env


def git(args: list[str], cwd: Path, *, binary: bool = False) -> bytes:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=600,
                            env=_git_env())  # fmt: skip
    if result.returncode != 0:
        error = result.stderr.decode(errors="replace").strip()[-300:]
        raise Unavailable(f"git {args[0]} failed in {cwd}: {error}")
    return result.stdout if binary else result.stdout.strip()


class Source(Protocol):
    """Something to score; `resolve` names what `commit` is now, `copy_into` writes it out."""

    location: str

    def resolve(self, commit: str) -> str: ...

    def copy_into(self, sha: str, dest: Path) -> None: ...


class GitSource:
    """A git repository; commits are fetched into `workdir/mirror.git`."""

    def __init__(self, location: str, workdir: Path) -> None:
        self.location = location
        self.mirror = workdir / "mirror.git"

    def resolve(self, commit: str) -> str:
        if not (self.mirror / "HEAD").exists():
            self.mirror.mkdir(parents=True, exist_ok=True)
            git(["init", "--quiet", "--bare"], self.mirror)
        refspec = "+refs/heads/*:refs/remotes/origin/*"
        git(["fetch", "--quiet", "--force", "--no-tags", self.location, refspec], self.mirror)
        for candidate in (f"refs/remotes/origin/{commit}", commit):
            result = subprocess.run(
                ["git", "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}"],
                cwd=self.mirror, capture_output=True, text=True, env=_git_env(),
            )  # fmt: skip
            if result.returncode == 0:
                return result.stdout.strip()
        raise NotFound(f"commit or branch {commit!r} is not in {self.location}")

    def copy_into(self, sha: str, dest: Path) -> None:
        # `git archive` writes the commit's tree as it is: no hooks, filters or index of a
        # checkout run, and nothing the scored code wrote last time is there.
        data = git(["archive", "--format=tar", sha], self.mirror, binary=True)
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            extract_all(archive, dest, strict=False)


class FolderSource:
    """A plain folder (not a git repository): scored as its files are now."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.location = str(folder)

    def _files(self) -> list[Path]:
        found = []
        for root, dirs, files in os.walk(self.folder):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_NAMES)
            found += [Path(root) / f for f in sorted(files) if f not in SKIPPED_NAMES]
        return found

    def resolve(self, commit: str) -> str:
        if commit != "main":
            raise InvalidInput(
                f"{self.folder} is a plain folder, not a git repository: it has no commit "
                f"{commit!r}; leave out --commit to score the folder as it is"
            )
        digest = hashlib.sha256()
        for path in self._files():
            digest.update(str(path.relative_to(self.folder)).encode() + b"\0")
            digest.update(path.read_bytes() if not path.is_symlink() else b"->" + bytes(path))
            digest.update(b"\0")
        return "folder-" + digest.hexdigest()[:57]

    def copy_into(self, sha: str, dest: Path) -> None:
        dest.mkdir(parents=True, exist_ok=True)
        for path in self._files():
            target = dest / path.relative_to(self.folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                target.symlink_to(os.readlink(path))
            else:
                shutil.copy2(path, target)


def open_source(location: str | Path, workdir: Path) -> Source:
    """The source at `location`: a local path (made absolute; a git repository or a plain
    folder) or a URL of a git repository."""
    text = str(location)
    path = Path(text).expanduser()
    if "://" in text or (not path.exists() and ":" in text and not text.startswith(("/", "."))):
        return GitSource(text, workdir)  # a URL or scp-like address
    if not path.exists():
        raise NotFound(f"{text} does not exist: give a git repository (path or URL) or a folder")
    path = path.resolve()
    if not path.is_dir():
        raise InvalidInput(f"{path} is a file: give a git repository or a folder")
    if (path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir()):
        return GitSource(str(path), workdir)
    return FolderSource(path)
