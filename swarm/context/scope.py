"""Claim scopes: paths, globs, symbols and topics, and whether two scopes can touch the same
thing.

A scope item is a topic (`topic:<name>`, compared case-insensitively), a repository path or glob
(`src/parser/**`, `src/*.py`, `docs/api.md`), or a symbol in one file (`src/text.py::pluralize`,
`src/text.py::Inflector.camelize`). A path without glob characters also covers everything below
it, so claiming `src/parser` claims `src/parser/lexer.py`. Two globs overlap when some path
matches both; this is decided exactly (segment by segment, with `**` spanning any number of
segments), not by comparing prefixes. Two symbols overlap only when they are in the same file and
one names the other or what contains it (`Inflector` and `Inflector.camelize`); a symbol and a
path or glob overlap when the path covers the symbol's file, so many workers can claim different
functions of one file without stepping on each other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import cache

from swarm.errors import InvalidInput

TOPIC_PREFIX = "topic:"
MAX_ITEMS = 64
MAX_ITEM_LENGTH = 300
GLOB_CHARS = set("*?[")
SYMBOL_SEPARATOR = "::"
# Dotted names: a function, a class, a method (Class.method), in any language's usual spelling.
_SYMBOL = re.compile(r"[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*")

# Tokens of a compiled segment pattern: ("*",) any run, ("?",) one char, ("c", x) a literal,
# ("[", chars, negated) a class.
Token = tuple[object, ...]


def normalize(scope: object) -> tuple[str, ...]:
    """Validate a scope from a request and return its canonical items (order kept, no repeats)."""
    if scope is None:
        return ()
    if isinstance(scope, str) or not isinstance(scope, Sequence):
        raise InvalidInput(
            'scope must be a list of strings, e.g. ["src/parser/**", "topic:error-messages"]'
        )
    if len(scope) > MAX_ITEMS:
        raise InvalidInput(f"scope has {len(scope)} items; the limit is {MAX_ITEMS}")
    items: list[str] = []
    for raw in scope:
        if not isinstance(raw, str):
            raise InvalidInput(f"scope items must be strings; got {type(raw).__name__} {raw!r}")
        item = raw.strip()
        if not item:
            raise InvalidInput("scope items must not be empty")
        if len(item) > MAX_ITEM_LENGTH or "\n" in item or "\x00" in item:
            raise InvalidInput(
                f"scope item {item[:40]!r}... is over {MAX_ITEM_LENGTH} characters or has a "
                "newline or a NUL character"
            )
        if item.lower().startswith(TOPIC_PREFIX):
            name = item[len(TOPIC_PREFIX) :].strip().lower()
            if not name:
                raise InvalidInput("a topic needs a name after 'topic:', e.g. topic:error-messages")
            item = TOPIC_PREFIX + name
        elif SYMBOL_SEPARATOR in item:
            item = _normalize_symbol(item)
        else:
            item = _normalize_path(item)
        if item not in items:
            items.append(item)
    return tuple(items)


def _normalize_symbol(item: str) -> str:
    path, _, symbol = item.partition(SYMBOL_SEPARATOR)
    symbol = symbol.strip()
    if not _SYMBOL.fullmatch(symbol):
        raise InvalidInput(
            f"scope {item!r}: after '::' name a symbol of the file, e.g. src/text.py::pluralize "
            "or src/text.py::Inflector.camelize (names joined by dots)"
        )
    if set(path) & GLOB_CHARS:
        raise InvalidInput(
            f"scope {item!r}: a symbol belongs to one file; name the file without '*', '?' "
            "or '[' (e.g. src/text.py::pluralize)"
        )
    return _normalize_path(path.strip()) + SYMBOL_SEPARATOR + symbol


def split_symbol(item: str) -> tuple[str, str | None]:
    """(path, symbol) of a scope item; the symbol is None for paths, globs and topics."""
    if item.startswith(TOPIC_PREFIX) or SYMBOL_SEPARATOR not in item:
        return item, None
    path, _, symbol = item.partition(SYMBOL_SEPARATOR)
    return path, symbol


def symbols_meet(a: str, b: str) -> bool:
    """Whether two dotted symbols can be the same code: equal, or one contains the other."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _normalize_path(path: str) -> str:
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise InvalidInput(f"scope path {path!r} must stay inside the repository (no '..')")
    if not parts:
        raise InvalidInput(f"scope path {path!r} names no file; use '**' for the whole repository")
    return "/".join(parts)


def overlaps(a: Iterable[str], b: Iterable[str]) -> bool:
    """True when some item of scope `a` and some item of scope `b` can touch the same thing."""
    b_items = list(b)
    return any(item_overlaps(x, y) for x in a for y in b_items)


@cache
def item_overlaps(a: str, b: str) -> bool:
    a_topic, b_topic = a.startswith(TOPIC_PREFIX), b.startswith(TOPIC_PREFIX)
    if a_topic or b_topic:
        return a == b
    (a_path, a_symbol), (b_path, b_symbol) = split_symbol(a), split_symbol(b)
    if a_symbol is not None and b_symbol is not None:
        return a_path == b_path and symbols_meet(a_symbol, b_symbol)
    if a_symbol is not None or b_symbol is not None:
        return item_overlaps(a_path, b_path)  # a path or glob covers every symbol of its files
    return any(
        _intersect(_path_tokens(x), _path_tokens(y), _segments_meet)
        for x in _covering(a)
        for y in _covering(b)
    )


def _covering(path: str) -> tuple[str, ...]:
    if path.endswith("**"):
        return (path,)
    return (path, path + "/**")


@cache
def _path_tokens(path: str) -> tuple[Token, ...]:
    return tuple(("*",) if seg == "**" else ("c", _segment_tokens(seg)) for seg in path.split("/"))


@cache
def _segment_tokens(segment: str) -> tuple[Token, ...]:
    tokens: list[Token] = []
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            if not tokens or tokens[-1] != ("*",):
                tokens.append(("*",))
        elif ch == "?":
            tokens.append(("?",))
        elif ch == "[" and (end := _class_end(segment, i)) != -1:
            body = segment[i + 1 : end]
            negated = body.startswith("!")
            tokens.append(("[", _expand_class(body[1:] if negated else body), negated))
            i = end
        else:
            tokens.append(("c", ch))
        i += 1
    return tuple(tokens)


def _class_end(segment: str, start: int) -> int:
    """Index of the `]` closing the class that opens at `start`, or -1 if it is a literal `[`."""
    j = start + 1
    if segment[j : j + 1] == "!":
        j += 1
    if segment[j : j + 1] == "]":
        j += 1
    return segment.find("]", j)


def _expand_class(body: str) -> frozenset[str]:
    chars: set[str] = set()
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            chars.update(chr(c) for c in range(ord(body[i]), ord(body[i + 2]) + 1))
            i += 3
        else:
            chars.add(body[i])
            i += 1
    return frozenset(chars)


def _chars_meet(a: Token, b: Token) -> bool:
    if a[0] == "?" or b[0] == "?":
        return True
    if a[0] == "c" and b[0] == "c":
        return a[1] == b[1]
    if a[0] == "c":
        a, b = b, a
    if b[0] == "c":  # a is a class
        chars, negated = a[1], a[2]
        assert isinstance(chars, frozenset)
        return (b[1] in chars) != negated
    # Two classes: decide exactly unless both are negated (then some char is always shared).
    a_chars, a_neg, b_chars, b_neg = a[1], a[2], b[1], b[2]
    assert isinstance(a_chars, frozenset) and isinstance(b_chars, frozenset)
    if a_neg and b_neg:
        return True
    if a_neg:
        return bool(b_chars - a_chars)
    if b_neg:
        return bool(a_chars - b_chars)
    return bool(a_chars & b_chars)


def _segments_meet(a: Token, b: Token) -> bool:
    seg_a, seg_b = a[1], b[1]
    assert isinstance(seg_a, tuple) and isinstance(seg_b, tuple)
    return _intersect(seg_a, seg_b, _chars_meet)


def _intersect(a: Sequence[Token], b: Sequence[Token], meet: object) -> bool:
    """Whether two token sequences, where ("*",) matches any run of tokens, share a word."""
    assert callable(meet)
    seen: set[tuple[int, int]] = set()
    stack = [(0, 0)]
    while stack:
        i, j = stack.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        a_end, b_end = i == len(a), j == len(b)
        if a_end and b_end:
            return True
        a_star = not a_end and a[i] == ("*",)
        b_star = not b_end and b[j] == ("*",)
        if a_star:
            stack.append((i + 1, j))  # the star matches nothing more
            if not b_end:
                stack.append((i, j + 1))  # the star swallows b's next token
        if b_star:
            stack.append((i, j + 1))
            if not a_end:
                stack.append((i + 1, j))
        if not (a_star or b_star or a_end or b_end) and meet(a[i], b[j]):
            stack.append((i + 1, j + 1))
    return False
