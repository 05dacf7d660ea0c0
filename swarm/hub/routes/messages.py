"""Message routes: the `tasks` channel, direct messages, and the per-iteration digest."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from pydantic import BaseModel

from swarm.errors import Forbidden
from swarm.hub import serialize
from swarm.hub.delivery import answer
from swarm.hub.deps import CurrentWorker, Operator, Reader, RuntimeDep, needs, short_call
from swarm.hub.edge import MAX_ID
from swarm.messages.ports import TASKS_CHANNEL
from swarm.switches import require

router = APIRouter(prefix="/v1", tags=["messages"])


class SayIn(BaseModel):
    body: str


class DirectIn(BaseModel):
    to: str
    body: str


@router.post(
    "/channel",
    summary="Post to the tasks channel (low priority: read at iteration start)",
    dependencies=[needs("channel")],
)
@short_call
def say(body: SayIn, worker: CurrentWorker, runtime: RuntimeDep) -> dict[str, Any]:
    posted = runtime.messages.post(worker, body.body, TASKS_CHANNEL)
    return answer(runtime, worker, {"message": serialize.message(posted)})


@router.post(
    "/operator/channel",
    summary="A person posts to the tasks channel (steers the swarm)",
    dependencies=[needs("channel"), Operator],
)
def operator_say(body: SayIn, runtime: RuntimeDep) -> dict[str, Any]:
    posted = runtime.messages.post("operator", body.body, TASKS_CHANNEL)
    return {"result": {"message": serialize.message(posted)}, "delivery": None}


@router.post(
    "/dm",
    summary="Send a direct message (high priority: shown at the peer's next call)",
    dependencies=[needs("dms")],
)
@short_call
def direct(body: DirectIn, worker: CurrentWorker, runtime: RuntimeDep) -> dict[str, Any]:
    recipient = runtime.registry.by_name(body.to.strip())
    sent = runtime.messages.direct(worker, recipient, body.body)
    return answer(runtime, worker, {"message": serialize.message(sent)})


@router.get(
    "/inbox",
    summary="The channel digest: posts you have not seen yet, oldest first",
    dependencies=[needs("channel")],
)
@short_call
def inbox(
    worker: CurrentWorker, runtime: RuntimeDep, limit: int = Query(50, ge=1, le=500)
) -> dict[str, Any]:
    digest = runtime.messages.take_channel(worker, limit)
    result = {"channel": [serialize.message(m) for m in digest.messages], "more": digest.more}
    return answer(runtime, worker, result)


@router.get(
    "/messages",
    summary="Stored messages: a channel's posts, or one worker's DMs (that worker or the operator)",
)
def history(
    reader: Reader,
    runtime: RuntimeDep,
    channel: str | None = None,
    worker: str | None = None,
    after: int = Query(0, ge=0, le=MAX_ID),
    limit: int = Query(100, ge=1, le=1000),
) -> dict[str, Any]:
    require(runtime.settings.switches, "dms" if worker else "channel")
    who = runtime.registry.by_name(worker) if worker else None
    if who is not None and reader is not None and reader.id != who.id:
        raise Forbidden(
            f"{who.name}'s direct messages are read only by {who.name} (and the operator); "
            "read yours with ?worker=<your name> or sw inbox"
        )
    if channel is None and who is None:
        channel = TASKS_CHANNEL
    rows = runtime.messages.history(channel=channel, worker=who, after_id=after, limit=limit)
    return {"result": {"messages": [serialize.message(m) for m in rows]}, "delivery": None}
