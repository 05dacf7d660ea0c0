"""Context grep: a regular expression run in linear time (RE2), narrowed by a trigram index.

The index can only answer "which rows contain this literal". So from the pattern we take the
literals that every match must contain (`required_literals`); the database returns the rows
holding all of them, and RE2 checks each candidate. A pattern with no literal of three or more
characters falls back to a scan, newest first, that stops at the limit.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any

import re2

from swarm.errors import InvalidInput

MIN_LITERAL = 3  # trigram indexes need at least three characters
MAX_PATTERN = 1000

# The stdlib's own regex parser (private but stable since 3.11); we only read the tree it builds.
sre_parse: Any = importlib.import_module("re._parser")

_C = sre_parse  # constants live beside the parser
LITERAL = _C.LITERAL
SUBPATTERN = _C.SUBPATTERN
MAX_REPEAT = _C.MAX_REPEAT
MIN_REPEAT = _C.MIN_REPEAT
POSSESSIVE_REPEAT = getattr(_C, "POSSESSIVE_REPEAT", None)
AT = _C.AT
ATOMIC_GROUP = getattr(_C, "ATOMIC_GROUP", None)


@dataclass(frozen=True)
class Pattern:
    """A compiled, validated grep pattern and the literals an index can look for."""

    source: str
    regex: Any
    literals: tuple[str, ...]

    def search(self, text: str) -> bool:
        return self.regex.search(text) is not None


def compile_pattern(pattern: str, *, ignore_case: bool = False) -> Pattern:
    if not pattern:
        raise InvalidInput("the grep pattern is empty; use '.' to match every entry")
    if len(pattern) > MAX_PATTERN:
        raise InvalidInput(
            f"the grep pattern is {len(pattern)} characters; the limit is {MAX_PATTERN}"
        )
    options = re2.Options()
    options.case_sensitive = not ignore_case
    options.log_errors = False
    options.max_mem = 64 << 20
    try:
        # Multi-line, like grep: ^ and $ match at the start and end of every line.
        regex = re2.compile("(?m)" + pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        reason = reason.decode() if isinstance(reason, bytes) else str(reason)
        raise InvalidInput(
            f"invalid regular expression {pattern!r}: {reason}. The syntax is RE2's "
            "(like Python's re, without backreferences or lookaround)"
        ) from exc
    return Pattern(pattern, regex, required_literals(pattern))


def required_literals(pattern: str) -> tuple[str, ...]:
    """Literals (>= 3 chars) that every match of `pattern` contains; empty if none are certain."""
    try:
        tree = sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError, ValueError, TypeError):
        return ()  # RE2-only syntax: no index help, the scan still runs in linear time
    runs: list[str] = []
    current = _collect(list(tree), runs)
    runs.append(current)
    literals = sorted({r for r in runs if len(r) >= MIN_LITERAL and "\n" not in r}, key=len)
    # The longest few literals are the most selective; more add cost without narrowing much.
    return tuple(reversed(literals[-3:]))


def _collect(items: list[tuple[Any, Any]], runs: list[str]) -> str:
    """Walk a parsed sequence; return the literal run still open at its end."""
    current = ""
    for op, arg in items:
        if op is LITERAL:
            current += chr(arg)
        elif op is SUBPATTERN:
            # (group, add_flags, del_flags, pattern): the group is a plain sequence.
            inner_flags = arg[1]
            if inner_flags & (re.IGNORECASE | re.VERBOSE):
                runs.append(current)
                current = ""
                continue
            inner_runs: list[str] = []
            tail = _collect(list(arg[3]), inner_runs)
            if not inner_runs:  # the whole group is one literal: it joins the current run
                current += tail
            else:
                inner_runs[0] = current + inner_runs[0]
                runs.extend(inner_runs)
                current = tail
        elif op is ATOMIC_GROUP and op is not None:
            runs.append(current)
            inner: list[str] = []
            inner.append(_collect(list(arg), inner))
            runs.extend(inner)
            current = ""
        elif op in (MAX_REPEAT, MIN_REPEAT) or (POSSESSIVE_REPEAT and op is POSSESSIVE_REPEAT):
            low, _high, sub = arg
            runs.append(current)
            current = ""
            if low >= 1:
                inner_runs = []
                inner_runs.append(_collect(list(sub), inner_runs))
                runs.extend(inner_runs)
        elif op is AT:
            continue  # anchors match no characters and do not break a run
        else:  # alternation, classes, any-char, backrefs...: nothing certain here
            runs.append(current)
            current = ""
    return current
