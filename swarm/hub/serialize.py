"""Plain-dict views of the domain objects, as the hub answers them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_core import to_json

from swarm.context.model import AppendResult, Claim, Entry, EntryDelivery
from swarm.messages.ports import Message


def entry(e: Entry) -> dict[str, Any]:
    return {
        "id": e.id,
        "time": e.created_at,
        "author": e.author,
        "type": e.type.value,
        "body": e.body,
        "scope": list(e.scope),
        "refs": list(e.refs),
    }


def claim(c: Claim, now: float) -> dict[str, Any]:
    return {
        "id": c.id,
        "owner": c.owner,
        "scope": list(c.scope),
        "body": c.body,
        "created": c.created_at,
        "lease_until": c.lease_until,
        "state": c.state(now),
        "ended_by": c.ended_by,
    }


def message(m: Message) -> dict[str, Any]:
    return {
        "id": m.id,
        "time": m.created_at,
        "author": m.author,
        "body": m.body,
        "channel": m.channel,
        "to": m.recipient,
    }


def delivery(d: EntryDelivery, dms: Sequence[Message], *, grep_hint: bool = True) -> dict[str, Any]:
    """`grep_hint`: name the grep that finds the entries left out (not in a run without grep)."""
    block: dict[str, Any] = {
        "entries": [entry(e) for e in d.shown],
        "more": d.more,
        "messages": [message(m) for m in dms],
    }
    if d.more and grep_hint:
        block["grep"] = _grep(d)
    return block


def _grep(d: EntryDelivery) -> str:
    return f"sw grep . --after {d.first_id - 1} --before {d.last_id + 1}"


class AnswerJSON:
    """The JSON of answers that carry entries, built from each entry's JSON, made once.

    The same bytes as `to_json` of the dicts above. Entries never change, and in a busy hub the
    newest ones go out in hundreds of delivery blocks a second, so POST /v1/entries answers this
    way instead of building and encoding the same entries' dicts for every caller. Keeps the
    `size` entries made last; for the event loop only (not thread-safe).
    """

    def __init__(self, size: int = 4096, *, grep_hint: bool = True) -> None:
        self.size = size
        self.grep_hint = grep_hint
        self._made: dict[int, bytes] = {}

    def entry(self, e: Entry) -> bytes:
        made = self._made.get(e.id)
        if made is None:
            made = self._made[e.id] = to_json(entry(e))
            if len(self._made) > self.size:
                del self._made[next(iter(self._made))]  # the oldest made
        return made

    def delivery(self, d: EntryDelivery, dms: Sequence[Message]) -> bytes:
        parts = [
            b'{"entries":[',
            b",".join([self.entry(e) for e in d.shown]),
            b'],"more":',
            str(d.more).encode(),
            b',"messages":',
            to_json([message(m) for m in dms]),
        ]
        if d.more and self.grep_hint:
            parts += [b',"grep":', to_json(_grep(d))]
        parts.append(b"}")
        return b"".join(parts)

    def appended(self, made: AppendResult, now: float) -> bytes:
        """The result of recording an entry: the entry, the claims it overlaps or ends."""
        return (
            b'{"entry":'
            + self.entry(made.entry)
            + b',"overlaps":'
            + to_json([claim(c, now) for c in made.overlaps])
            + b',"ended":'
            + to_json([claim(c, now) for c in made.ended])
            + b"}"
        )

    @staticmethod
    def answer(result: bytes, delivery: bytes) -> bytes:
        """An answer from its encoded result and delivery block."""
        return b'{"result":' + result + b',"delivery":' + delivery + b"}"
