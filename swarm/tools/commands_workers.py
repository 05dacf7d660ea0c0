"""`sw workers`: your peers, what each is doing, and when the hub last heard from it."""

from __future__ import annotations

from typing import Any

import click

from swarm.tools import format as fmt
from swarm.tools.sw import run


def worker_line(w: dict[str, Any], now: float) -> str:
    seen = f"last seen {fmt.ago(w['heartbeat_at'], now)}" if w.get("heartbeat_at") else "never seen"
    claims = w.get("claims") or []
    if claims:
        doing = "; ".join(
            f"claim #{c['id']} [{', '.join(fmt.one_line(p) for p in c['scope'])}]: "
            f"{fmt.one_line(c['body'], 80)}"
            for c in claims
        )
    else:
        doing = "no claim"
    model = f" ({fmt.one_line(w['model'])})" if w.get("model") else ""
    return f"{w['name']}{model} {w['state']}, {seen}, {doing}"


def _roster(result: dict[str, Any]) -> str:
    rows = result["workers"]
    if not rows:
        return "no workers yet"
    alive = sum(1 for w in rows if w["state"] in ("idle", "in_session"))
    head = f"{len(rows)} workers, {alive} alive:"
    return "\n".join([head, *(worker_line(w, result["now"]) for w in rows)])


def register(group: click.Group) -> None:
    @group.command()
    def workers() -> None:
        """Your peers: each one's state (idle, in_session, stopped, dead), current claims,
        and when the hub last heard from it. Use the names with sw dm."""
        run("GET", "/v1/workers", _roster)
