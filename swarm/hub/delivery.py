"""The delivery block every worker-facing answer carries: peers' new entries and pending DMs."""

from __future__ import annotations

from typing import Any

from swarm.bootstrap import Runtime
from swarm.hub import serialize
from swarm.registry import Worker


def answer(runtime: Runtime, worker: Worker, result: Any) -> dict[str, Any]:
    """Wrap a result with what is new for `worker`; computed after the call's own effect."""
    entries = runtime.context.deliver(worker.id, runtime.settings.delivery_cap)
    dms = runtime.messages.take_direct(worker)
    return {"result": result, "delivery": serialize.delivery(entries, dms)}
