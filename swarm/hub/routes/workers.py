"""Worker routes: registration, status heartbeats, the roster, and a no-op for measurements."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from swarm.hub.delivery import answer
from swarm.hub.deps import CurrentWorker, Joiner, Reader, RuntimeDep, short_call

router = APIRouter(prefix="/v1", tags=["workers"])


class RegisterIn(BaseModel):
    model: str | None = Field(default=None, description="The model this worker runs, if any")


class StatusIn(BaseModel):
    state: str = Field(description="idle | in_session | stopped | ...", max_length=32)
    status: dict[str, Any] = Field(default_factory=dict)


@router.post(
    "/workers", summary="Register a worker; answers its name and token", dependencies=[Joiner]
)
def register(body: RegisterIn, runtime: RuntimeDep) -> dict[str, Any]:
    worker, token = runtime.registry.register(model=body.model)
    return {"result": {"id": worker.id, "name": worker.name, "token": token}, "delivery": None}


@router.get("/workers", summary="Every worker, with its state and liveness")
def roster(reader: Reader, runtime: RuntimeDep) -> dict[str, Any]:
    now = runtime.clock()
    timeout = runtime.settings.heartbeat_timeout_seconds
    rows = [
        {
            "id": w.id,
            "name": w.name,
            "model": w.model,
            "state": w.liveness(now, timeout),
            "status": w.status,
            "heartbeat_at": w.heartbeat_at,
        }
        for w in runtime.registry.list()
    ]
    return {"result": {"workers": rows}, "delivery": None}


@router.post("/status", summary="Report this worker's state (also a heartbeat)")
@short_call
def status(body: StatusIn, worker: CurrentWorker, runtime: RuntimeDep) -> dict[str, Any]:
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
    return answer(runtime, worker, {"id": worker.id, "name": worker.name})


@router.get("/ping", summary="Authenticated no-op (no database): the HTTP ceiling in benchmarks")
async def ping(worker: CurrentWorker) -> dict[str, Any]:
    # On the event loop: a thread-pool hop would make the "ceiling" dearer than real calls.
    return {"result": {"pong": worker.name}, "delivery": None}
