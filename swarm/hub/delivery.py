"""The delivery block every worker-facing answer carries: peers' new entries and pending DMs."""

from __future__ import annotations

from typing import Any

from swarm.bootstrap import Runtime
from swarm.delivery import Delivery
from swarm.hub import serialize
from swarm.registry import Worker


def answer(runtime: Runtime, worker: Worker, result: Any) -> dict[str, Any]:
    """Wrap a result with what is new for `worker`; computed after the call's own effect."""
    got = runtime.deliverer.collect(worker.id)
    return {"result": result, "delivery": delivery_block(runtime, worker, got)}


def delivery_block(runtime: Runtime, worker: Worker, got: Delivery) -> dict[str, Any]:
    dms = list(got.messages)
    if not runtime.deliverer.with_messages:  # DMs live on another server (e.g. Mattermost)
        dms = runtime.messages.take_direct(worker)
    return serialize.delivery(got.entries, dms)
