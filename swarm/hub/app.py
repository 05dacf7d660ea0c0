"""The hub: one FastAPI app over the runtime. It stores, searches, relays and merges; it never
decides who does what."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from swarm import __version__, dashboard
from swarm.bootstrap import Runtime
from swarm.errors import CheckFailed, MergeConflict, SwarmError
from swarm.hub import serialize
from swarm.hub.deps import bad_request
from swarm.hub.group_commit import GroupCommit
from swarm.hub.routes import context, messages, run, workers, workspace
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
    app.state.answer_json = serialize.AnswerJSON()

    for router in (workers.router, context.router, messages.router, run.router):
        _add_routes(app, router)
    workspace.mount(app, runtime)
    dashboard.mount(app, runtime)
    install_timing(app, runtime)  # per-route latency histogram, written on shutdown

    @app.exception_handler(SwarmError)
    async def _swarm_error(_request: Request, exc: SwarmError) -> JSONResponse:
        content: dict[str, Any] = {"error": exc.message, "kind": type(exc).__name__}
        if isinstance(exc, MergeConflict):
            content["files"] = exc.files
        if isinstance(exc, CheckFailed):
            content["output"] = exc.output
        return JSONResponse(content, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            {"error": bad_request(exc.errors()), "kind": "InvalidInput"}, status_code=422
        )

    @app.get("/health", tags=["hub"], summary="Liveness and what the hub runs on")
    def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "version": __version__,
            "database": runtime.db.dialect,
            "workspace": runtime.settings.workspace if runtime.workspace else None,
            "messages": runtime.settings.messages,
        }

    return app


def _add_routes(app: FastAPI, router: APIRouter) -> None:
    """Add a router's routes to the app itself. `include_router` would wrap them in a layer that
    rebuilds each route's context on every request (a third of a call's CPU, measured)."""
    app.router.routes.extend(router.routes)
