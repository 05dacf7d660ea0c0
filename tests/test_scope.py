"""Claim scopes: paths and globs compared exactly, topics by name."""

from __future__ import annotations

import pytest

from swarm.context.scope import normalize, overlaps
from swarm.errors import InvalidInput


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("src/parser/**", "src/parser/lexer.py", True),
        ("src/parser", "src/parser/lexer.py", True),  # a directory covers what is below it
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/a/b.py", False),  # * stays within one segment
        ("src/**/*.py", "src/a/b/c.py", True),
        ("src/a*.py", "src/*b.py", True),  # e.g. src/ab.py
        ("src/a*.py", "src/b*.py", False),
        ("src/[ab].py", "src/c.py", False),
        ("src/[!ab].py", "src/c.py", True),
        ("docs/*.md", "src/*.md", False),
        ("*/lexer.py", "src/lexer.py", True),
        ("src/parser.py", "src/parser", False),
        ("**", "anything/at/all.txt", True),
        ("topic:Errors", "topic:errors", True),
        ("topic:errors", "src/errors.py", False),
        ("./src//x.py", "src/x.py", True),
    ],
)
def test_overlap(a: str, b: str, expected: bool) -> None:
    assert overlaps(normalize([a]), normalize([b])) is expected
    assert overlaps(normalize([b]), normalize([a])) is expected


@pytest.mark.parametrize(
    ("scope", "message"),
    [
        ("src/a.py", "must be a list of strings"),
        ([3], "must be strings"),
        ([""], "must not be empty"),
        (["../x"], "inside the repository"),
        (["topic:"], "needs a name"),
        (["x"] * 65, "the limit is 64"),
    ],
)
def test_bad_scopes(scope: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        normalize(scope)
