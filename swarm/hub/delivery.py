"""The delivery block every worker-facing answer carries: peers' new entries and pending DMs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from swarm.bootstrap import Runtime
from swarm.delivery import Delivery
from swarm.hub import serialize
from swarm.messages.ports import Message
from swarm.registry import Worker


def answer(runtime: Runtime, worker: Worker, result: Any) -> dict[str, Any]:
    """Wrap a result with what is new for `worker`; computed after the call's own effect."""
    got = runtime.deliverer.collect(worker.id)
    return {"result": result, "delivery": delivery_block(runtime, worker, got)}


def delivery_block(runtime: Runtime, worker: Worker, got: Delivery) -> dict[str, Any]:
    return serialize.delivery(
        got.entries,
        direct_messages(runtime, worker, got),
        grep_hint="grep" not in runtime.settings.switches,
    )


def direct_messages(runtime: Runtime, worker: Worker, got: Delivery) -> Sequence[Message]:
    """The DMs a delivery carries: taken with it, or, when DMs live on another server (e.g.
    Mattermost), taken from there now (a network call). None in a run without DMs."""
    if runtime.deliverer.with_messages or not runtime.deliverer.dms:
        return got.messages
    return runtime.messages.take_direct(worker)
