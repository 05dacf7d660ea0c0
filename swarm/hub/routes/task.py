"""The task route: what a worker needs to start (goal; for sim runs, the solution units)."""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import APIRouter, Depends

from swarm.hub.deps import RuntimeDep, TokenDep, is_operator
from swarm.tasks.published import read_published

router = APIRouter(prefix="/v1", tags=["run"])


async def joiner_or_worker(runtime: RuntimeDep, token: TokenDep) -> None:
    """A worker process asks before its workers register (join token); workers may ask later."""
    if is_operator(runtime, token) or secrets.compare_digest(
        token.encode(), runtime.join_token.encode()
    ):
        return
    runtime.registry.authenticate(token)  # raises Unauthorized for anything else


@router.get(
    "/task",
    summary="The run's task as workers see it: name, goal, harness, team size, sim solution",
    dependencies=[Depends(joiner_or_worker)],
    responses={
        401: {"description": "No token, or not a join, worker or operator token"},
        503: {"description": "No task published yet: the run's set-up (bootstrap) writes it"},
    },
)
def task(runtime: RuntimeDep) -> dict[str, Any]:
    return {"result": read_published(runtime.settings.run_dir), "delivery": None}
