"""The code as the dashboard shows it: main's file tree, its diff against the start of the run,
and how big each pull request's change is. Read from the run's bare repository."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pygit2

from swarm.errors import Unavailable
from swarm.workspace.diffs import DIFF_LIMIT

MAX_FILES = 5000  # a tree this big is listed up to here, and says how many it left out


def _stats(diff: pygit2.Diff) -> dict[str, int]:
    stats = diff.stats
    return {"files": stats.files_changed, "added": stats.insertions, "removed": stats.deletions}


class Code:
    """Reads one bare repository; PR sizes are kept, as a PR's change never changes once read
    at the same commits."""

    def __init__(self, git_dir: Path | None) -> None:
        self.git_dir = git_dir
        self._sizes: dict[tuple[int, str], dict[str, int] | None] = {}
        self._lock = threading.Lock()

    def _repo(self) -> pygit2.Repository:
        if self.git_dir is None or not (self.git_dir / "HEAD").exists():
            raise Unavailable("this hub has no local repository to read the code from")
        return pygit2.Repository(str(self.git_dir))

    def pr_sizes(self, rows: Iterable[Any]) -> dict[int, dict[str, int] | None]:
        """Files, lines added and removed of each PR (number, state, head, merge_commit): a
        merged PR against main before its merge, another against its merge base with main."""
        try:
            repo = self._repo()
        except Unavailable:
            return {}
        out: dict[int, dict[str, int] | None] = {}
        for row in rows:
            key = (int(row.number), f"{row.head}:{row.merge_commit}")
            with self._lock:
                if key not in self._sizes:
                    self._sizes[key] = self._size(repo, row)
                out[key[0]] = self._sizes[key]
        return out

    @staticmethod
    def _size(repo: pygit2.Repository, row: Any) -> dict[str, int] | None:
        try:
            if row.state == "merged" and row.merge_commit:
                merge = repo[pygit2.Oid(hex=row.merge_commit)].peel(pygit2.Commit)
                return _stats(repo.diff(merge.parents[0], merge))
            head = pygit2.Oid(hex=row.head)
            main = repo.references["refs/heads/main"].target
            base = repo.merge_base(main, head)
            return _stats(repo.diff(base, head)) if base is not None else None
        except (KeyError, ValueError, TypeError, pygit2.GitError):
            return None  # the branch's commits are gone

    def main(self) -> dict[str, Any]:
        """Main's files (with what changed since the start) and its diff against the start."""
        repo = self._repo()
        ref = repo.references.get("refs/heads/main")
        if ref is None:
            return {"main": None, "start": None, "files": [], "more": 0, "stats": None,
                    "diff": ""}  # fmt: skip
        head = repo[ref.target].peel(pygit2.Commit)
        walker = repo.walk(head.id, pygit2.enums.SortMode.TOPOLOGICAL)
        walker.simplify_first_parent()
        start = head
        for commit in walker:  # the last is the first commit of main: the task's start
            start = commit
        diff = repo.diff(start, head)
        changed: dict[str, dict[str, Any]] = {}
        for patch in diff:
            if patch is None:
                continue
            _context, added, removed = patch.line_stats
            status = {pygit2.enums.DeltaStatus.ADDED: "added",
                      pygit2.enums.DeltaStatus.DELETED: "deleted"}.get(
                patch.delta.status, "modified")  # fmt: skip
            path = patch.delta.new_file.path or patch.delta.old_file.path
            changed[path] = {"status": status, "added": added, "removed": removed}
        files: list[dict[str, Any]] = []
        same = {"status": "", "added": 0, "removed": 0}
        for path, size in _walk(repo, head.tree, ""):
            files.append({"path": path, "size": size, **changed.pop(path, same)})
        files += [{"path": p, "size": 0, **c} for p, c in changed.items()]  # deleted since
        files.sort(key=lambda f: f["path"])
        patch_text = diff.patch or ""
        if len(patch_text) > DIFF_LIMIT:
            patch_text = (
                patch_text[:DIFF_LIMIT] + f"\n[diff truncated at {DIFF_LIMIT} characters]\n"
            )
        return {
            "main": str(head.id),
            "start": str(start.id),
            "files": files[:MAX_FILES],
            "more": max(0, len(files) - MAX_FILES),
            "stats": _stats(diff),
            "diff": patch_text,
        }


def _walk(repo: pygit2.Repository, tree: pygit2.Tree, prefix: str) -> Iterable[tuple[str, int]]:
    for item in tree:
        path = prefix + str(item.name)
        if item.type_str == "tree":
            sub = repo[item.id]
            assert isinstance(sub, pygit2.Tree)
            yield from _walk(repo, sub, path + "/")
        elif item.type_str == "blob":
            blob = repo[item.id]
            assert isinstance(blob, pygit2.Blob)
            yield path, blob.size
