"""The messages port: a shared task channel (low priority) and direct messages (high priority).

Adapters: `local` (the hub's database) and `mattermost`. Both give the same guarantees: a DM is
handed to its recipient exactly once, by `take_direct`, which the hub calls on every worker call;
channel posts are handed out once, by `take_channel`, which only the per-iteration digest calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from swarm.errors import NUL_REFUSED, InvalidInput
from swarm.registry import Worker

TASKS_CHANNEL = "tasks"
HUB_AUTHOR = "hub"  # messages the infrastructure itself sends (e.g. claim overlaps)


def check_body(body: object, limit: int) -> str:
    """A message body as every adapter accepts it: not empty, at most `limit` characters."""
    if not isinstance(body, str) or not body.strip():
        raise InvalidInput("the message is empty")
    if len(body) > limit:
        raise InvalidInput(f"the message is {len(body)} characters; the limit is {limit}")
    if "\x00" in body:
        raise InvalidInput(NUL_REFUSED.format(what="the message"))
    return body.strip()


@dataclass(frozen=True)
class Message:
    id: int
    created_at: float
    author: str  # a worker's name, "hub", or "operator"
    body: str
    channel: str | None = None  # set for channel posts
    recipient: str | None = None  # set for direct messages

    @property
    def time(self) -> str:
        return datetime.fromtimestamp(self.created_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ChannelDigest:
    messages: tuple[Message, ...]
    more: int  # posts still unread after these (the next digest continues from here)


class Messages(Protocol):
    def post(self, author: Worker | str, body: str, channel: str = TASKS_CHANNEL) -> Message:
        """Post to a channel; `author` is a worker, or "operator"/"hub" for people and the hub."""
        ...

    def direct(self, author: Worker | str, recipient: Worker, body: str) -> Message: ...

    def take_direct(self, worker: Worker) -> list[Message]:
        """Direct messages to `worker` not handed to it yet, oldest first; each exactly once."""
        ...

    def take_channel(self, worker: Worker, limit: int = 50) -> ChannelDigest:
        """Channel posts by others that `worker` has not been handed yet, oldest first."""
        ...

    def history(
        self,
        *,
        channel: str | None = None,
        worker: Worker | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> list[Message]:
        """Stored messages, oldest first: a channel's posts, or every DM to or from `worker`."""
        ...
