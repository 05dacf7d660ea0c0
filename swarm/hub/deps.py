"""Request dependencies: the runtime, the calling worker, the operator."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Request

from swarm.bootstrap import Runtime
from swarm.errors import Forbidden, Unauthorized
from swarm.registry import Worker


async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def bearer_token(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(
            "missing bearer token: send 'Authorization: Bearer <token>' (sw reads SWARM_TOKEN)"
        )
    return token.strip()


TokenDep = Annotated[str, Depends(bearer_token)]


def is_operator(runtime: Runtime, token: str) -> bool:
    return secrets.compare_digest(token.encode(), runtime.operator_token.encode())


async def current_worker(runtime: RuntimeDep, token: TokenDep) -> Worker:
    if is_operator(runtime, token):
        raise Forbidden("this call acts as a worker; use a worker's token, not the operator's")
    return runtime.registry.authenticate(token)


async def operator(runtime: RuntimeDep, token: TokenDep) -> None:
    if not is_operator(runtime, token):
        raise Forbidden("this call needs the operator token (see <run_dir>/operator.token)")


async def worker_or_operator(runtime: RuntimeDep, token: TokenDep) -> Worker | None:
    """Reading calls accept either: a person with the operator token, or a worker."""
    if is_operator(runtime, token):
        return None
    return runtime.registry.authenticate(token)


async def joiner(runtime: RuntimeDep, token: TokenDep) -> None:
    if not (
        is_operator(runtime, token)
        or secrets.compare_digest(token.encode(), runtime.join_token.encode())
    ):
        raise Forbidden("registering a worker needs the join token (SWARM_JOIN_TOKEN)")


CurrentWorker = Annotated[Worker, Depends(current_worker)]
Reader = Annotated[Worker | None, Depends(worker_or_operator)]
Operator = Depends(operator)
Joiner = Depends(joiner)
