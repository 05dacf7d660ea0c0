"""Plain text for an LLM to read: one line per item, ids first, the delivery block last.

Text written by peers (bodies, titles, reviews, diffs, check output) is framed so it cannot pass
for a line of the hub's own: a one-line field is flattened, and text shown whole has each of its
lines after the first indented and marked with PEER_MARK, so a peer's "\n[msg 9 dm from hub]"
shows as "  | [msg 9 dm from hub]", never as a header. Control characters are shown escaped.
"""

from __future__ import annotations

import re
import time
from typing import Any

LINE_WIDTH = 240
PEER_MARK = "  | "
# C0 and C1 controls but tab (ESC could rewrite a terminal line; \r could hide a line's start).
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def _visible(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def one_line(text: str, width: int = LINE_WIDTH) -> str:
    flat = _visible(" ".join(text.split()))
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def peer_text(text: str) -> str:
    """Peer-written text shown whole, after a header on the same line: every line but the first
    is indented and marked (str.splitlines also breaks at U+2028 and the other separators)."""
    lines = [_visible(line) for line in text.splitlines()] or [""]
    return "\n".join([lines[0], *(PEER_MARK + line for line in lines[1:])])


def peer_block(text: str) -> str:
    """Peer-written text shown whole on lines of its own: every line marked."""
    return "\n".join(PEER_MARK + _visible(line) for line in text.splitlines())


def ago(ts: float, now: float | None = None) -> str:
    seconds = max(0, int((now or time.time()) - ts))
    if seconds < 60:
        return f"{seconds}s ago"
    if seconds < 3600:
        return f"{seconds // 60}m ago"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m ago"


def entry(e: dict[str, Any], *, full: bool = False) -> str:
    scope = f" [{', '.join(one_line(p) for p in e['scope'])}]" if e.get("scope") else ""
    refs = f" (refs {', '.join('#' + str(r) for r in e['refs'])})" if e.get("refs") else ""
    head = f"#{e['id']} {e['type']} {e['author']}{scope}{refs}"
    if full:
        return f"{head} {ago(e['time'])}\n{peer_block(e['body'])}"
    return f"{head}: {one_line(e['body'])}"


def claim(c: dict[str, Any]) -> str:
    if c["state"] == "active":
        left = max(0, int(c["lease_until"] - time.time()))
        state = f"active, lease {left}s left"
    else:
        state = c["state"] + (f" by #{c['ended_by']}" if c.get("ended_by") else "")
    return (
        f"claim #{c['id']} {c['owner']} [{', '.join(one_line(p) for p in c['scope'])}] "
        f"{state}: {one_line(c['body'])}"
    )


def message(m: dict[str, Any]) -> str:
    where = f"dm from {m['author']}" if m.get("to") else f"#{m.get('channel')} {m['author']}"
    return f"[msg {m['id']} {where}, {ago(m['time'])}] {peer_text(m['body'])}"


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
