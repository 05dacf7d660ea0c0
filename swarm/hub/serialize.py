"""Plain-dict views of the domain objects, as the hub answers them."""

from __future__ import annotations

from typing import Any

from swarm.context.model import Claim, Entry, EntryDelivery
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


def delivery(d: EntryDelivery, dms: list[Message]) -> dict[str, Any]:
    block: dict[str, Any] = {
        "entries": [entry(e) for e in d.shown],
        "more": d.more,
        "messages": [message(m) for m in dms],
    }
    if d.more:
        block["grep"] = f"sw grep . --after {d.first_id - 1} --before {d.last_id + 1}"
    return block
