"""The hub: one FastAPI app over the runtime. It stores, searches, relays and merges; it never
decides who does what."""

from __future__ import annotations

import math
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from swarm import __version__, dashboard
from swarm.bootstrap import Runtime
from swarm.diskfull import is_disk_full
from swarm.errors import CheckFailed, MergeConflict, RateLimited, StorageFull, SwarmError
from swarm.hub import diskguard, hublog, idempotency, openapi, serialize
from swarm.hub.deps import bad_request
from swarm.hub.edge import EdgeGuard
from swarm.hub.group_commit import GroupCommit
from swarm.hub.limits import RateLimits
from swarm.hub.liveness import Upkeep
from swarm.hub.routes import context, messages, oracle, run, task, workers, workspace
from swarm.hub.timing import install_timing


def create_app(runtime: Runtime) -> FastAPI:
    app = FastAPI(
        title="swarm hub",
        version=__version__,
        description="Shared context, messages and workspace for a swarm of coding agents.",
    )
    app.state.runtime = runtime
    app.state.group_commit = group_commit = GroupCommit(runtime)
    app.router.on_shutdown.append(group_commit.close)
    app.state.answer_json = serialize.AnswerJSON(grep_hint="grep" not in runtime.settings.switches)
    app.state.rate_limits = RateLimits(runtime.settings)
    app.state.disk = disk = diskguard.DiskWatch(runtime.settings.run_dir, clock=runtime.clock)
    logs = hublog.Installed(runtime.db)  # warnings and errors kept in the database too
    app.router.on_startup.append(logs.start)
    app.router.on_shutdown.append(logs.stop)

    routers = (workers.router, context.router, messages.router, run.router, task.router)
    for router in (*routers, oracle.router):
        _add_routes(app, router)
    workspace.mount(app, runtime)
    dashboard.mount(app, runtime)
    install_timing(app, runtime)  # per-route latency histogram, written on shutdown
    idempotency.install(app, runtime.db)  # a retried write is applied once
    diskguard.install(app, runtime.settings.run_dir, disk)  # no new work on a nearly full disk
    # Outermost: a body over the limit or text no engine stores is refused before anything else.
    app.add_middleware(
        EdgeGuard,
        max_body_bytes=runtime.settings.max_body_bytes,
        # The push limit itself is git's own (receive.maxInputSize: a readable line in git's
        # output); this one only stops a body that never ends.
        git_max_body_bytes=runtime.settings.git_max_push_bytes + 1024**2,
    )
    upkeep = Upkeep(runtime, disk=disk)  # dead workers noticed, PRs reconciled, continuously
    app.router.on_startup.append(upkeep.start)
    app.router.on_shutdown.append(upkeep.stop)

    @app.exception_handler(SwarmError)
    async def _swarm_error(request: Request, exc: SwarmError) -> JSONResponse:
        if isinstance(exc, StorageFull):
            disk.failed(f"{request.method} {request.url.path}: {exc.message}")
        content: dict[str, Any] = {"error": exc.message, "kind": type(exc).__name__}
        if isinstance(exc, MergeConflict):
            content["files"] = exc.files
        if isinstance(exc, CheckFailed):
            content["output"] = exc.output
        headers = None
        if isinstance(exc, RateLimited):
            headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
        return JSONResponse(content, status_code=exc.status, headers=headers)

    @app.exception_handler(OperationalError)
    @app.exception_handler(OSError)
    async def _io_error(request: Request, exc: Exception) -> JSONResponse:
        # A write the full disk refused (SQLite's SQLITE_FULL, ENOSPC): a clear 507 that the
        # clients retry, not a bare 500. Anything else is a real fault: raised on.
        if not is_disk_full(exc):
            raise exc
        cause = getattr(exc, "orig", None) or exc  # the driver's own words, not SQLAlchemy's
        disk.failed(f"{request.method} {request.url.path}: {type(cause).__name__}: {cause}")
        return JSONResponse(
            {"error": diskguard.full_message(runtime.settings.run_dir), "kind": "StorageFull"},
            status_code=StorageFull.status,
            headers={"Retry-After": "5"},
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own refusals (a body that is not JSON, an unknown path): the hub's error body.
        kind = "InvalidInput" if exc.status_code == 400 else "HTTPError"
        return JSONResponse(
            {"error": str(exc.detail), "kind": kind},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            {"error": bad_request(exc.errors()), "kind": "InvalidInput"}, status_code=422
        )

    openapi.install(app)

    @app.get("/health", tags=["hub"], summary="Liveness and what the hub runs on")
    def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "version": __version__,
            "database": runtime.db.dialect,
            "workspace": runtime.settings.workspace if runtime.workspace else None,
            "messages": runtime.settings.messages,
            "without": list(runtime.settings.switches),
        }

    return app


def _add_routes(app: FastAPI, router: APIRouter) -> None:
    """Add a router's routes to the app itself. `include_router` would wrap them in a layer that
    rebuilds each route's context on every request (a third of a call's CPU, measured)."""
    app.router.routes.extend(router.routes)
