"""Worker routes: registration, status heartbeats, the roster, and a no-op for measurements."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from swarm.errors import InvalidInput
from swarm.hub.delivery import answer
from swarm.hub.deps import (
    CurrentWorker,
    Joiner,
    Reader,
    RuntimeDep,
    TokenDep,
    is_operator,
    short_call,
)

router = APIRouter(prefix="/v1", tags=["workers"])


class RegisterIn(BaseModel):
    model: str | None = Field(
        default=None, max_length=200, description="The model this worker runs, if any"
    )


class StatusIn(BaseModel):
    state: str = Field(description="idle | in_session | stopped | ...", max_length=32)
    status: dict[str, Any] = Field(default_factory=dict)


@router.post(
    "/workers", summary="Register a worker; answers its name and token", dependencies=[Joiner]
)
def register(body: RegisterIn, runtime: RuntimeDep, token: TokenDep) -> dict[str, Any]:
    # The join token registers the run's declared number of workers; the operator, any.
    limit = None if is_operator(runtime, token) else runtime.settings.max_workers
    worker, issued = runtime.registry.register(model=body.model, limit=limit)
    return {"result": {"id": worker.id, "name": worker.name, "token": issued}, "delivery": None}


@router.get("/workers", summary="Every worker: state, liveness, current claims and when last seen")
def roster(reader: Reader, runtime: RuntimeDep) -> dict[str, Any]:
    now = runtime.clock()
    timeout = runtime.settings.heartbeat_timeout_seconds
    holding: dict[str, list[dict[str, Any]]] = {}
    no_claims = "claims" in runtime.settings.switches  # none to show: the roster keeps []
    for c in [] if no_claims else runtime.context.claims(limit=5000):
        holding.setdefault(c.owner, []).append({"id": c.id, "scope": list(c.scope),
                                                "body": c.body})  # fmt: skip
    rows = [
        {
            "id": w.id,
            "name": w.name,
            "model": w.model,
            "state": w.liveness(now, timeout),
            "status": w.status,
            "heartbeat_at": w.heartbeat_at,
            "claims": holding.get(w.name, []),
        }
        for w in runtime.registry.list()
    ]
    result = {"workers": rows, "now": now}
    # A worker asking (`sw workers`) gets its delivery block too, as with every `sw` call.
    return (
        answer(runtime, reader, result)
        if reader is not None
        else {"result": result, "delivery": None}
    )


@router.post("/status", summary="Report this worker's state (also a heartbeat)")
@short_call
def status(body: StatusIn, worker: CurrentWorker, runtime: RuntimeDep) -> dict[str, Any]:
    # Every roster read returns every worker's status: one worker's must stay small.
    size = len(json.dumps(body.status))
    if size > runtime.settings.status_limit_bytes:
        raise InvalidInput(
            f"status is {size:,} bytes as JSON; the limit is "
            f"{runtime.settings.status_limit_bytes:,} (SWARM_STATUS_LIMIT_BYTES): report less"
        )
    runtime.registry.report(worker, body.state, body.status)
    flags = runtime.run.flags()
    result: dict[str, Any] = {
        "stop": flags.get("stop") == "1",
        "no_new_sessions": flags.get("no_new_sessions") == "1",
    }
    if body.state == "stopped":
        result["released"] = [c.id for c in runtime.context.release_all(worker.id)]
    return {"result": result, "delivery": None}


@router.get("/whoami", summary="The calling worker, plus its delivery block")
@short_call
def whoami(worker: CurrentWorker, runtime: RuntimeDep) -> dict[str, Any]:
    result = {"id": worker.id, "name": worker.name, "without": list(runtime.settings.switches)}
    return answer(runtime, worker, result)


@router.get("/ping", summary="Authenticated no-op (no database): the HTTP ceiling in benchmarks")
async def ping(worker: CurrentWorker) -> dict[str, Any]:
    # On the event loop: a thread-pool hop would make the "ceiling" dearer than real calls.
    return {"result": {"pong": worker.name}, "delivery": None}
