"""Scopes that fit the code: symbol scopes through the real `sw`, the report's duplicated work
from what merged PRs changed, and inflection with 8 simulated workers on one file."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_sw_cli import sw

from swarm.hub.server import BackgroundHub
from swarm.report.changes import duplicated_changes, symbol_spans
from swarm.tasks.units import parse_units
from swarm.tools.client import HubClient

ROOT = Path(__file__).resolve().parents[1]
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c",
       "init.defaultBranch=main"]  # fmt: skip

MODULE = """import re


def pluralize(word):
    raise NotImplementedError


def singularize(word):
    raise NotImplementedError


class Inflector:
    def camelize(self, word):
        raise NotImplementedError

    def underscore(self, word):
        raise NotImplementedError
"""


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_claims_on_different_symbols_of_one_file_do_not_overlap(
    hub: BackgroundHub, new_worker: Callable[[], HubClient]
) -> None:
    tokens = [new_worker().token for _ in range(4)]
    assert all(tokens)
    a, b, c, d = (str(t) for t in tokens)
    first = sw("claim", "lib.py::pluralize", "-m", "plural", token=a, url=hub.url)
    assert first.returncode == 0 and "recorded #1 CLAIM w1 [lib.py::pluralize]" in first.stdout
    other = sw("claim", "./lib.py::Inflector.camelize", "-m", "camel", token=b, url=hub.url)
    assert other.returncode == 0 and "OVERLAPS" not in other.stdout, other.stdout
    assert "[lib.py::Inflector.camelize]" in other.stdout
    # The class holds the method; the file holds every symbol in it.
    whole_class = sw("claim", "lib.py::Inflector", "-m", "class", token=c, url=hub.url)
    assert re.findall(r"OVERLAPS claim #(\d+)", whole_class.stdout) == ["2"]
    whole_file = sw("claim", "lib.py", "-m", "everything", token=d, url=hub.url)
    assert sorted(re.findall(r"OVERLAPS claim #(\d+)", whole_file.stdout)) == ["1", "2", "3"]
    bad = sw("claim", "lib*.py::pluralize", "-m", "x", token=a, url=hub.url)
    assert bad.returncode == 1 and "a symbol belongs to one file" in bad.stdout + bad.stderr
    assert len(sw("claims", token=a, url=hub.url).stdout.strip().splitlines()) >= 4


def test_symbol_spans_name_functions_classes_and_methods() -> None:
    spans = {name: (a, b) for a, b, name in symbol_spans(MODULE)}
    assert list(spans) == ["pluralize", "singularize", "Inflector", "Inflector.camelize",
                           "Inflector.underscore"]  # fmt: skip
    assert spans["pluralize"] == (4, 5) and spans["Inflector"] == (12, 17)
    assert symbol_spans("def broken(:\n") == []


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run([*GIT, *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_duplicated_work_is_two_merged_prs_changing_the_same_symbol_or_line(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "lib.py").write_text(MODULE)
    (repo / "notes.txt").write_text("one\ntwo\nthree\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "start")

    def branch(name: str, edits: dict[str, tuple[str, str]]) -> None:
        git(repo, "checkout", "-q", "-b", name, "main")
        for path, (old, new) in edits.items():
            text = (repo / path).read_text()
            assert text.count(old) == 1
            (repo / path).write_text(text.replace(old, new))
        git(repo, "commit", "-qam", name)

    plural = ("def pluralize(word):\n    raise NotImplementedError",
              "def pluralize(word):\n    return word + 's'")  # fmt: skip
    branch("w1-plural", {"lib.py": plural})
    branch("w2-singular", {"lib.py": ("def singularize(word):\n    raise NotImplementedError",
                                      "def singularize(word):\n    return word[:-1]")})  # fmt: skip
    branch("w3-plural-again", {"lib.py": plural})  # the same work as w1's, started from main
    camel = ("        raise NotImplementedError\n\n    def underscore",
             "        return word.title()\n\n    def underscore")  # fmt: skip
    branch("w4-camel", {"lib.py": camel})
    branch("w5-notes", {"notes.txt": ("two\n", "TWO\n")})
    branch("w6-notes", {"notes.txt": ("two\n", "2\n")})
    git(repo, "checkout", "-q", "main")
    prs = []
    for number, (name, author) in enumerate(
        [("w1-plural", "w1"), ("w2-singular", "w2"), ("w3-plural-again", "w3"),
         ("w4-camel", "w4"), ("w5-notes", "w5"), ("w6-notes", "w6")], start=1,
    ):  # fmt: skip
        git(repo, "merge", "-q", "--no-ff", "-X", "ours", "-m", f"Merge PR #{number}", name)
        prs.append(SimpleNamespace(number=number, author=author,
                                   merge_commit=git(repo, "rev-parse", "HEAD")))  # fmt: skip
    found = duplicated_changes(repo / ".git", prs)
    assert [(d["a"], d["b"], d["what"]) for d in found] == [
        (1, 3, ["lib.py::pluralize"]),
        (5, 6, ["notes.txt: two"]),
    ]
    # The same author changing their own code again is not duplicated work.
    for pr in prs:
        pr.author = "w1"
    assert duplicated_changes(repo / ".git", prs) == []


def test_units_name_their_symbols_and_bad_scopes_are_refused() -> None:
    units = parse_units('[{"id": "f", "scope": ["./a.py::f"], '
                        '"edits": [{"path": "a.py", "old": "x", "new": "y"}]}]')  # fmt: skip
    assert units[0].scope == ("a.py::f",)
    with pytest.raises(Exception, match=r"unit #0 \(f\): scope 'a.py::f\(\)'"):
        parse_units('[{"id": "f", "scope": ["a.py::f()"], '
                    '"edits": [{"path": "a.py", "old": "x", "new": "y"}]}]')  # fmt: skip


def query(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute(sql).fetchall()


@pytest.mark.slow
def test_inflection_with_8_sim_workers_reports_no_duplicated_work_and_no_overlap(
    tmp_path: Path,
) -> None:
    task = tmp_path / "inflection"
    task.mkdir()
    shutil.copy(ROOT / "examples" / "tasks" / "inflection" / "task.toml", task)
    swarm = [sys.executable, "-m", "swarm"]
    prepared = subprocess.run([*swarm, "task", "prepare", str(task)], capture_output=True,
                              text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    units = parse_units((task / "solution" / "units.json").read_text())
    # Every unit is one function of the one module, and claims exactly that function.
    assert len(units) == 12
    assert all(u.scope == (f"inflection/__init__.py::{u.id}",) for u in units)
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [*swarm, "run", str(task), "--workers", "8", "--harness", "sim", "--think", "0.5",
         "--run-dir", str(run_dir), "--quiet"],
        capture_output=True, text=True, timeout=400, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hidden tests on main: 455/455" in done.stdout + done.stderr
    db = run_dir / "hub.db"
    claimed = [s for (s,) in query(db, "SELECT scope FROM claims")]
    assert all(s.startswith("inflection/__init__.py::") for s in claimed), claimed
    notices = query(db, "SELECT body FROM messages WHERE author = 'hub'")
    assert notices == []
    report = subprocess.run([*swarm, "report", str(run_dir), "-o", str(tmp_path / "r.html")],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert report.returncode == 0, report.stderr
    summary = (tmp_path / "r.md").read_text()
    assert "- duplicated work: **0**" in summary
    assert "- overlapping claim pairs: **0**" in summary
