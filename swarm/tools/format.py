"""Plain text for an LLM to read: one line per item, ids first, the delivery block last."""

from __future__ import annotations

import time
from typing import Any

LINE_WIDTH = 240


def _one_line(text: str, width: int = LINE_WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def ago(ts: float, now: float | None = None) -> str:
    seconds = max(0, int((now or time.time()) - ts))
    if seconds < 60:
        return f"{seconds}s ago"
    if seconds < 3600:
        return f"{seconds // 60}m ago"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m ago"


def entry(e: dict[str, Any], *, full: bool = False) -> str:
    scope = f" [{', '.join(e['scope'])}]" if e.get("scope") else ""
    refs = f" (refs {', '.join('#' + str(r) for r in e['refs'])})" if e.get("refs") else ""
    head = f"#{e['id']} {e['type']} {e['author']}{scope}{refs}"
    if full:
        return f"{head} {ago(e['time'])}\n{e['body']}"
    return f"{head}: {_one_line(e['body'])}"


def claim(c: dict[str, Any]) -> str:
    if c["state"] == "active":
        left = max(0, int(c["lease_until"] - time.time()))
        state = f"active, lease {left}s left"
    else:
        state = c["state"] + (f" by #{c['ended_by']}" if c.get("ended_by") else "")
    return (
        f"claim #{c['id']} {c['owner']} [{', '.join(c['scope'])}] {state}: {_one_line(c['body'])}"
    )


def message(m: dict[str, Any]) -> str:
    where = f"dm from {m['author']}" if m.get("to") else f"#{m.get('channel')} {m['author']}"
    return f"[msg {m['id']} {where}, {ago(m['time'])}] {m['body']}"


def delivery(block: dict[str, Any] | None) -> str:
    if not block:
        return ""
    lines: list[str] = []
    if block.get("messages"):
        lines.append("--- direct messages for you ---")
        lines += [message(m) for m in block["messages"]]
    shown, more = block.get("entries") or [], block.get("more", 0)
    if shown:
        note = (
            f" ({len(shown)} newest of {len(shown) + more}; the rest: {block['grep']})"
            if more
            else ""
        )
        lines.append(f"--- new from peers{note} ---")
        lines += [entry(e) for e in shown]
    return "\n".join(lines)
