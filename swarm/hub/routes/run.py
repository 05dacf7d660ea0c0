"""Run routes: harness sessions, evaluator checkpoints, the summary, and stopping the run."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, StringConstraints

from swarm.evaluation.history import failing_tests
from swarm.hub.deps import CurrentWorker, Operator, Reader, RuntimeDep, short_call
from swarm.hub.edge import COUNT_MAX, IdPath

router = APIRouter(prefix="/v1", tags=["run"])


class SessionStartIn(BaseModel):
    harness: str = Field(max_length=32)
    model: str | None = Field(default=None, max_length=200)


class SessionEndIn(BaseModel):
    ended: str
    steps: int = Field(default=0, ge=0, le=COUNT_MAX)
    tokens_in: int = Field(default=0, ge=0, le=COUNT_MAX)
    tokens_out: int = Field(default=0, ge=0, le=COUNT_MAX)
    cost: float = Field(default=0.0, ge=0, allow_inf_nan=False, description="US dollars")
    detail: str = Field(default="", max_length=4000)


class CheckpointIn(BaseModel):
    time: float = Field(ge=0, allow_inf_nan=False)
    commit: str = Field(max_length=64)
    passed: int = Field(ge=0, le=COUNT_MAX)
    total: int = Field(ge=0, le=COUNT_MAX)
    duration: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    reason: str | None = None
    status: Literal["scored", "tampered", "incomplete", "error"] = "scored"
    # Each hidden test's outcome by its id, when the scoring listed them.
    tests: dict[
        Annotated[str, StringConstraints(min_length=1, max_length=1000)],
        Literal["passed", "failed", "error", "skipped"],
    ] = Field(default_factory=dict, max_length=100_000)


@router.post("/sessions", summary="A worker starts a harness session")
@short_call
def start_session(
    body: SessionStartIn, worker: CurrentWorker, runtime: RuntimeDep
) -> dict[str, Any]:
    session_id, number = runtime.run.start_session(worker.id, body.harness, body.model)
    return {"result": {"id": session_id, "number": number}, "delivery": None}


@router.post("/sessions/{session_id}/end", summary="A worker ends a session with its totals")
@short_call
def end_session(
    session_id: IdPath, body: SessionEndIn, worker: CurrentWorker, runtime: RuntimeDep
) -> dict[str, Any]:
    runtime.run.end_session(worker.id, session_id, **body.model_dump())
    return {"result": {"ok": True}, "delivery": None}


@router.get("/sessions", summary="Harness sessions, oldest first")
def list_sessions(reader: Reader, runtime: RuntimeDep, worker: str | None = None) -> dict[str, Any]:
    worker_id = runtime.registry.by_name(worker).id if worker else None
    rows = runtime.run.sessions(worker_id)
    return {"result": {"sessions": [asdict(r) for r in rows]}, "delivery": None}


@router.post(
    "/checkpoints", summary="The evaluator records a score of main", dependencies=[Operator]
)
def record_checkpoint(body: CheckpointIn, runtime: RuntimeDep) -> dict[str, Any]:
    checkpoint_id = runtime.run.record_checkpoint(**body.model_dump())
    return {"result": {"id": checkpoint_id}, "delivery": None}


@router.get("/checkpoints", summary="The hidden-test pass rate of main over time")
def list_checkpoints(reader: Reader, runtime: RuntimeDep) -> dict[str, Any]:
    rows = runtime.run.checkpoints()
    return {"result": {"checkpoints": [asdict(r) for r in rows]}, "delivery": None}


@router.get("/checkpoints/failing", summary="The hidden tests main still fails, and since when")
def failing(reader: Reader, runtime: RuntimeDep) -> dict[str, Any]:
    return {"result": failing_tests(runtime.db), "delivery": None}


@router.get("/summary", summary="Counters for progress displays")
def summary(request: Request, reader: Reader, runtime: RuntimeDep) -> dict[str, Any]:
    result = runtime.run.summary()
    result["without"] = list(runtime.settings.switches)
    counts = getattr(runtime.workspace, "counts", None)
    if callable(counts):
        result["prs"] = counts()
    disk = getattr(request.app.state, "disk", None)
    if disk is not None:  # whether writes fail for a full disk, and how often they did
        result["disk"] = disk.status()
    return {"result": result, "delivery": None}


@router.post(
    "/operator/stop",
    summary="Ask every worker to stop after its current step",
    dependencies=[Operator],
)
def stop(runtime: RuntimeDep) -> dict[str, Any]:
    runtime.run.set_flag("stop", "1")
    return {"result": {"stop": True}, "delivery": None}


class FlagIn(BaseModel):
    key: str = Field(pattern=r"^[a-z_]{1,64}$")
    value: str = Field(max_length=200)


@router.post(
    "/operator/flags", summary="Set a run flag (stop, no_new_sessions)", dependencies=[Operator]
)
def set_flag(body: FlagIn, runtime: RuntimeDep) -> dict[str, Any]:
    runtime.run.set_flag(body.key, body.value)
    return {"result": runtime.run.flags(), "delivery": None}
