"""Request dependencies: the runtime, the calling worker, the operator."""

from __future__ import annotations

import functools
import inspect
import secrets
import typing
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from swarm.bootstrap import Runtime
from swarm.errors import Forbidden, Unauthorized
from swarm.registry import Worker
from swarm.switches import require

T = TypeVar("T")


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


def needs(*names: str) -> Any:
    """A route dependency: refuse (swarm.switches.Disabled, 403) in a run without any of
    `names`, before the route does anything."""

    async def check(runtime: RuntimeDep) -> None:
        require(runtime.settings.switches, *names)

    return Depends(check)


def bad_request(errors: Sequence[Any], *, in_body: bool = False) -> str:
    """One line for pydantic's errors about a request: where, and what was wrong. FastAPI puts
    "body" first in the location of an error in the JSON body; `in_body` says the errors are
    pydantic's own, about the body, without it."""
    problems = []
    for err in errors:
        loc = tuple(err.get("loc", ()))
        if not in_body and loc[:1] == ("body",):
            loc = loc[1:]
        where = ".".join(str(p) for p in loc)
        problems.append(f"{where or 'request'}: {err.get('msg', 'invalid')}")
    return "bad request: " + "; ".join(problems)


def short_call(fn: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """Mark a route whose work is a few quick database statements.

    On SQLite such a call runs on the event loop: writes are serialized anyway, and skipping the
    thread-pool hop and its GIL hand-offs cut a call's server CPU by more than half (measured on
    appends, which now go through swarm.hub.group_commit instead). On PostgreSQL every statement
    waits on the network, so it goes to the pool.
    Long calls (grep, feeds, git) stay plain `def` routes and always use the pool.
    """
    hints = typing.get_type_hints(fn, include_extras=True)
    signature = inspect.signature(fn)
    resolved = signature.replace(
        parameters=[
            p.replace(annotation=hints.get(p.name, p.annotation))
            for p in signature.parameters.values()
        ],
        return_annotation=hints.get("return", signature.return_annotation),
    )

    @functools.wraps(fn)
    async def route(**kwargs: Any) -> T:
        runtime: Runtime = kwargs["runtime"]
        if runtime.db.is_sqlite:
            return fn(**kwargs)
        return await run_in_threadpool(functools.partial(fn, **kwargs))

    route.__signature__ = resolved  # type: ignore[attr-defined]
    return route
