"""Real git plumbing on a bare repository, for the Gitea stand-in (merges done by git itself)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

ZERO = "0" * 40
IDENTITY = {
    "GIT_AUTHOR_NAME": "standin",
    "GIT_AUTHOR_EMAIL": "standin@swarm.invalid",
    "GIT_COMMITTER_NAME": "standin",
    "GIT_COMMITTER_EMAIL": "standin@swarm.invalid",
}


class GitError(Exception):
    """A git command failed."""


class BareRepo:
    """A bare repository driven through git's plumbing commands."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not (path / "HEAD").exists():
            path.mkdir(parents=True, exist_ok=True)
            self.git("init", "--bare", "--initial-branch=main", ".")

    def git(self, *args: str, env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> str:
        result = subprocess.run(
            ["git", *args],
            cwd=self.path,
            env={**os.environ, **IDENTITY, **(env or {})},
            capture_output=True,
            text=True,
        )
        if result.returncode not in ok:
            raise GitError(f"git {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def head(self, branch: str) -> str | None:
        out = self.git("rev-parse", "--verify", "-q", f"refs/heads/{branch}", ok=(0, 1))
        return out.strip() or None

    def branches(self) -> list[str]:
        out = self.git("for-each-ref", "--format=%(refname:short)", "refs/heads/")
        return out.split()

    def commit(
        self, branch: str, files: dict[str, str | None], message: str, base: str | None = None
    ) -> str:
        """Write `files` (None deletes) on top of `base` (default: the branch) into `branch`."""
        parent = self.head(base or branch) if (base or branch) else None
        with tempfile.TemporaryDirectory() as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            if parent:
                self.git("read-tree", parent, env=env)
            for name, content in files.items():
                if content is None:
                    self.git("update-index", "--force-remove", name, env=env)
                    continue
                blob = self._blob(content)
                self.git("update-index", "--add", "--cacheinfo", f"100644,{blob},{name}", env=env)
            tree = self.git("write-tree", env=env).strip()
        parents = ["-p", parent] if parent else []
        sha = self.git("commit-tree", tree, *parents, "-m", message).strip()
        self.git("update-ref", f"refs/heads/{branch}", sha)
        return sha

    def _blob(self, content: str) -> str:
        result = subprocess.run(
            ["git", "hash-object", "-w", "--stdin"],
            cwd=self.path,
            input=content,
            capture_output=True,
            text=True,
            check=True,
        )
        return result.stdout.strip()

    def merge_base(self, a: str, b: str) -> str | None:
        return self.git("merge-base", a, b, ok=(0, 1)).strip() or None

    def changed(self, base: str, head: str) -> list[str]:
        return self.git("diff", "--name-only", base, head).split()

    def diff(self, base: str, head: str) -> str:
        return self.git("diff", base, head)

    def commits(self, base: str, head: str) -> list[str]:
        return self.git("rev-list", "--reverse", f"{base}..{head}").split()

    def commit_files(self, sha: str) -> list[str]:
        return self.git("diff-tree", "--no-commit-id", "--name-only", "-r", "--root", sha).split()

    def try_merge(self, ours: str, theirs: str) -> tuple[str | None, list[str]]:
        """(tree, []) when the merge is clean, else (None, conflicting files)."""
        out = self.git(
            "merge-tree", "--write-tree", "--name-only", "--no-messages", ours, theirs, ok=(0, 1)
        )
        lines = out.splitlines()
        if len(lines) == 1:
            return lines[0], []
        return None, sorted(set(lines[1:]) - {""})

    def merge(self, branch: str, head: str, message: str) -> str:
        """Merge `head` into `branch` with a merge commit, moving the ref by compare-and-swap."""
        old = self.head(branch) or ZERO
        tree, conflicts = self.try_merge(old, head)
        if tree is None:
            raise GitError(f"conflict in {', '.join(conflicts)}")
        sha = self.git("commit-tree", tree, "-p", old, "-p", head, "-m", message).strip()
        self.git("update-ref", f"refs/heads/{branch}", sha, old)
        return sha
