"""Ablation switches: mechanisms a run is started without (`swarm run --without claims,dms`).

A switch removes its mechanism for the whole run, and the hub enforces it (an agent may call the
API directly, so `sw` alone could not): the routes refuse with `Disabled`, delivery blocks and
the channel digest drop what is off, and the prompt is rendered without its section.
"""

from __future__ import annotations

from collections.abc import Iterable

from swarm.errors import Forbidden

# What each switch takes away, said as the refusal explains it to an agent.
MECHANISMS: dict[str, str] = {
    "context": "this run has no shared context: nobody can record or read OBSERVED, FACT, FAIL "
    "or PATCH_SUMMARY entries, and answers carry no peer entries; keep notes in your checkout",
    "claims": "this run has no claims: nobody can claim, renew, release or list scopes; pick "
    "work from the goal, main and what peers tell you",
    "dms": "this run has no direct messages: nobody can send or receive one; the tasks "
    "channel (if on) is the only way to talk to peers",
    "channel": "this run has no tasks channel: nobody can post to it or read it",
    "grep": "this run has no search of the shared context's history: read the entries each "
    "answer delivers, `sw tail` and `sw show` instead",
    "reviews": "this run has no pull-request reviews: merge your own PRs once verified",
}
KNOWN = tuple(sorted(MECHANISMS))
ENV = "SWARM_WITHOUT"


class Disabled(Forbidden):
    """A mechanism the run was started without; nothing was changed."""


def parse_without(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """The switches named in `value` ("claims,dms", or a list), sorted and without repeats;
    raises InvalidInput naming the unknown ones and the known list."""
    from swarm.errors import InvalidInput

    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    names = {str(item).strip().lower() for item in items} - {""}
    unknown = sorted(names - set(MECHANISMS))
    if unknown:
        raise InvalidInput(
            f"unknown mechanism{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} in "
            f"--without ({ENV}); known: {', '.join(KNOWN)} (comma separated, e.g. claims,dms)"
        )
    return tuple(sorted(names))


def refusal(name: str) -> str:
    return f"disabled in this run (--without {name}): {MECHANISMS[name]}"


def require(without: Iterable[str], *names: str) -> None:
    """Raise Disabled for the first of `names` the run is without."""
    off = set(without)
    for name in names:
        if name in off:
            raise Disabled(refusal(name))


def enabled(without: Iterable[str]) -> dict[str, bool]:
    """Every mechanism and whether this run has it (what the prompt template reads)."""
    off = set(without)
    return {name: name not in off for name in KNOWN}
