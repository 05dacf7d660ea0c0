"""Claim scopes: paths and globs compared exactly, symbols by name within a file, topics by
name."""

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
        # Symbols: the same one, or a class and its method, in the same file.
        ("inflection/__init__.py::pluralize", "inflection/__init__.py::singularize", False),
        ("inflection/__init__.py::pluralize", "inflection/__init__.py::pluralize", True),
        ("a.py::Inflector", "a.py::Inflector.camelize", True),
        ("a.py::Inflector.camelize", "a.py::Inflector.underscore", False),
        ("a.py::Inflector", "a.py::InflectorBase", False),
        ("a.py::f", "b.py::f", False),
        ("./src//a.py:: f", "src/a.py::f", True),
        # A symbol and a path or glob: the path covers the symbol's file.
        ("a.py::f", "a.py", True),
        ("src/a.py::f", "src", True),
        ("src/a.py::f", "src/*.py", True),
        ("src/a.py::f", "src/**", True),
        ("src/a.py::f", "src/b.py", False),
        ("src/a.py::f", "docs/**", False),
        ("src/a.py::f", "topic:f", False),
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
        (["a.py::"], "after '::' name a symbol"),
        (["a.py::f()"], "after '::' name a symbol"),
        (["a.py::A..b"], "after '::' name a symbol"),
        (["src/*.py::f"], "a symbol belongs to one file"),
        (["::f"], "names no file"),
    ],
)
def test_bad_scopes(scope: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        normalize(scope)


def test_symbol_scopes_are_normalized() -> None:
    assert normalize(["./src//a.py :: Inflector.camelize", "src/a.py::Inflector.camelize"]) == (
        "src/a.py::Inflector.camelize",
    )


def test_the_reports_overlap_index_files_symbols_under_their_file() -> None:
    from swarm.report.overlap import overlap_pairs

    claims = [
        (1, "w1", normalize(["src/a.py::f"])),
        (2, "w2", normalize(["src/a.py::g"])),
        (3, "w3", normalize(["src/a.py::Cls.m"])),
        (4, "w4", normalize(["src/a.py::Cls"])),
        (5, "w5", normalize(["src/*.py"])),
        (6, "w6", normalize(["src/b.py"])),
    ]
    near = {(1, 5), (2, 5), (3, 5), (4, 5), (5, 6), (3, 4)}
    assert overlap_pairs(claims) == near
