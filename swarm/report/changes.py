"""What each merged PR changed, as lines and symbols, and which PRs changed the same ones.

A PR's change is its branch against the point it started from (the merge base of its head and
the `main` it was merged into), so a second PR that redid the first one's work shows, even when
its merge added nothing new to `main`. A changed line inside a Python function, class or method
counts as a change to that symbol (`path::Class.method`); any other changed line counts by its
text (`path: text`), blank lines not at all."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pygit2

Span = tuple[int, int, str]  # first line, last line (1-based), dotted symbol


def symbol_spans(source: str) -> list[Span]:
    """The functions, classes and methods of a Python source, innermost last (empty when the
    source does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    spans: list[Span] = []

    def visit(nodes: Iterable[ast.stmt], prefix: str) -> None:
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                name = prefix + node.name
                spans.append((first, node.end_lineno or node.lineno, name))
                if isinstance(node, ast.ClassDef):
                    visit(node.body, name + ".")

    visit(tree.body, "")
    return spans


def _enclosing(spans: list[Span], line: int) -> str | None:
    inside = [s for s in spans if s[0] <= line <= s[1]]
    return max(inside, key=lambda s: s[0])[2] if inside else None


def _text(repo: pygit2.Repository, oid: pygit2.Oid) -> str:
    if oid == pygit2.Oid(hex="0" * 40):
        return ""
    blob = repo[oid]
    assert isinstance(blob, pygit2.Blob)
    return blob.data.decode("utf-8", errors="replace")


def changed_keys(repo: pygit2.Repository, old: pygit2.Commit, new: pygit2.Commit) -> set[str]:
    """The symbols and lines that `new` changed relative to `old`."""
    keys: set[str] = set()
    for patch in repo.diff(old, new, context_lines=0):
        if patch is None or patch.delta.is_binary:
            continue
        delta = patch.delta
        python = delta.old_file.path.endswith(".py") or delta.new_file.path.endswith(".py")
        spans = (
            (symbol_spans(_text(repo, delta.old_file.id)),
             symbol_spans(_text(repo, delta.new_file.id)))
            if python else ([], [])
        )  # fmt: skip
        for hunk in patch.hunks:
            for line in hunk.lines:
                if line.origin == "-":
                    path, symbol = delta.old_file.path, _enclosing(spans[0], line.old_lineno)
                elif line.origin == "+":
                    path, symbol = delta.new_file.path, _enclosing(spans[1], line.new_lineno)
                else:
                    continue
                if symbol is not None:
                    keys.add(f"{path}::{symbol}")
                elif line.content.strip():
                    keys.add(f"{path}: {line.content.strip()}")
    return keys


def pr_changes(repo: pygit2.Repository, merge_commit: str) -> set[str] | None:
    """What the PR merged as `merge_commit` changed, or None when the commit is not there."""
    try:
        commit = repo[pygit2.Oid(hex=merge_commit)].peel(pygit2.Commit)
    except (KeyError, ValueError, TypeError, pygit2.GitError):
        return None
    if len(commit.parents) < 2:
        return changed_keys(repo, commit.parents[0], commit) if commit.parents else None
    main, head = commit.parents[0], commit.parents[1]
    base = repo.merge_base(main.id, head.id)
    start = repo[base].peel(pygit2.Commit) if base is not None else main
    return changed_keys(repo, start, head)


def duplicated_changes(git_dir: Path, merged: Iterable[Any], cap: int = 5) -> list[dict[str, Any]]:
    """Pairs of merged PRs by different authors that changed the same lines or symbols, with
    up to `cap` of what they both changed. `merged` rows have number, author, merge_commit."""
    repo = pygit2.Repository(str(git_dir))
    authors: dict[int, str] = {}
    by_key: dict[str, list[int]] = defaultdict(list)
    for pr in merged:
        keys = pr_changes(repo, str(pr.merge_commit)) if pr.merge_commit else None
        if keys is None:
            continue
        authors[int(pr.number)] = str(pr.author)
        for key in keys:
            by_key[key].append(int(pr.number))
    shared: dict[tuple[int, int], list[str]] = defaultdict(list)
    for key, numbers in by_key.items():
        for i, a in enumerate(numbers):
            for b in numbers[i + 1 :]:
                if authors[a] != authors[b]:
                    shared[(min(a, b), max(a, b))].append(key)
    return [
        {"kind": "PR", "a": a, "b": b, "what": sorted(keys)[:cap], "count": len(keys)}
        for (a, b), keys in sorted(shared.items())
    ]
