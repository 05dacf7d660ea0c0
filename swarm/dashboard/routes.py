"""The dashboard's HTTP surface: one HTML page, its static assets, and read-only JSON."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from swarm import __version__
from swarm.bootstrap import Runtime
from swarm.context import parse_type
from swarm.dashboard.activity import Activity
from swarm.dashboard.auth import VIEWER_TOKEN_ENV, no_worker, open_to, role_of, viewer
from swarm.dashboard.code import Code
from swarm.dashboard.queries import DashboardQueries
from swarm.dashboard.transcripts import transcript
from swarm.evaluation.history import failing_tests
from swarm.hub import serialize
from swarm.hub.edge import IdPath, IdQuery, TimeQuery
from swarm.messages.ports import TASKS_CHANNEL

HERE = Path(__file__).parent
_templates = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    undefined=StrictUndefined,
)


class Views:
    """The dashboard's query objects for one runtime."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.queries = DashboardQueries(
            runtime.db,
            run_dir=runtime.settings.run_dir,
            clock=runtime.clock,
            heartbeat_timeout=runtime.settings.heartbeat_timeout_seconds,
        )
        git_dir = getattr(runtime.workspace, "path", None)  # the embedded workspace's repository
        if not isinstance(git_dir, Path):
            git_dir = runtime.settings.run_dir / "workspace.git"  # a Gitea run's copy, at the end
        self.code = Code(git_dir)
        self.activity = Activity(self.queries, runtime.workspace, self.code)

    def warm(self) -> None:
        """Count the append-only tables once, off the request path (a big run takes a second)."""
        with self.runtime.db.read() as conn:
            self.queries.counters.entry_counts(conn)
            self.queries.counters.message_counts(conn)
            self.queries.counters.latest_threads(conn, 1)


async def get_views(request: Request) -> Views:
    views: Views = request.app.state.dashboard
    return views


ViewsDep = Annotated[Views, Depends(get_views)]
# The page runs only its own scripts, talks only to the hub, and is never framed (the operator's
# Stop button under another site's overlay). Styles stay inline-able: the views set a few.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
api = APIRouter(prefix="/dashboard/api", tags=["dashboard"], dependencies=[Depends(viewer)])
pages = APIRouter(tags=["dashboard"])


@pages.get("/", include_in_schema=False)
def root() -> RedirectResponse:
    return RedirectResponse("/dashboard")


@pages.get("/dashboard", response_class=HTMLResponse, summary="The live dashboard (one page)")
def page(request: Request) -> HTMLResponse:
    html = _templates.get_template("index.html").render(
        version=__version__, viewer_env=VIEWER_TOKEN_ENV, tasks=TASKS_CHANNEL
    )
    return HTMLResponse(html, headers={"Cache-Control": "no-store", **PAGE_HEADERS})


@api.get("/session", summary="Whether this page may read, and what its token allows")
def session(request: Request) -> dict[str, Any]:
    return {"role": role_of(request), "open": open_to(request), "version": __version__}


@api.get("/overview", summary="Workers, counters, the pass-rate curve, time and budget left")
def overview(views: ViewsDep) -> dict[str, Any]:
    return views.queries.overview()


@api.get(
    "/workers/{name}/sessions/{number}",
    summary="One session's transcript, step by step (people only: not worker tokens)",
    dependencies=[Depends(no_worker)],
)
def session_transcript(name: str, number: IdPath, views: ViewsDep) -> dict[str, Any]:
    return transcript(views.runtime.settings.run_dir / "workers" / "sessions", name, number)


@api.get("/code", summary="Main's file tree and its diff against the start of the run")
def code(views: ViewsDep) -> dict[str, Any]:
    return views.code.main()


@api.get("/tests", summary="The hidden tests main still fails, and since when")
def tests(views: ViewsDep) -> dict[str, Any]:
    return failing_tests(views.runtime.db)


@api.get("/entries", summary="Shared-context entries, newest first, paged by id")
def entries(
    views: ViewsDep,
    type: list[str] = Query(default=[]),
    author: str | None = None,
    since: TimeQuery = None,
    until: TimeQuery = None,
    before: IdQuery = None,
    limit: int | None = Query(None, ge=1, le=500),
) -> dict[str, Any]:
    types = [parse_type(t).value for t in type if t]
    return views.queries.entries(
        types=types, author=author or None, since=since, until=until, before=before, limit=limit
    )


@api.get("/grep", summary="Regular-expression search over the whole context (RE2)")
def grep(
    views: ViewsDep,
    pattern: str,
    ignore_case: bool = True,
    type: list[str] = Query(default=[]),
    author: str | None = None,
    before: IdQuery = None,
    limit: int = Query(50, ge=1, le=500),
) -> dict[str, Any]:
    runtime = views.runtime
    author_id = runtime.registry.by_name(author).id if author else None
    found = runtime.context.grep(
        pattern,
        ignore_case=ignore_case,
        types=[parse_type(t) for t in type if t],
        author_id=author_id,
        before_id=before,
        limit=limit,
    )
    rows = [serialize.entry(e) for e in found.entries]
    return {
        "entries": rows,
        "next": rows[-1]["id"] if found.truncated and rows else None,
        "indexed": found.used_index,
    }


@api.get("/entries/{entry_id}", summary="One entry, what it refers to, and what refers to it")
def entry(entry_id: IdPath, views: ViewsDep) -> dict[str, Any]:
    context = views.runtime.context
    found = context.get(entry_id)
    result: dict[str, Any] = {
        "entry": serialize.entry(found),
        "refs": [serialize.entry(context.get(r)) for r in found.refs],
        "referrers": [serialize.entry(e) for e in context.referrers(entry_id)],
    }
    if found.type.value == "CLAIM":
        result["claim"] = serialize.claim(context.claim(entry_id), views.runtime.clock())
    return result


@api.get("/claims", summary="The claims board: active claims with overlaps, then a page of all")
def claims(
    views: ViewsDep,
    state: str | None = None,
    owner: str | None = None,
    before: IdQuery = None,
    limit: int | None = Query(None, ge=1, le=500),
) -> dict[str, Any]:
    return views.queries.claims(state=state or None, owner=owner or None, before=before,
                                limit=limit)  # fmt: skip


@api.get("/prs", summary="Pull requests, newest first, paged by number")
def prs(
    views: ViewsDep,
    state: str | None = None,
    author: str | None = None,
    before: IdQuery = None,
    limit: int | None = Query(None, ge=1, le=500),
) -> dict[str, Any]:
    return views.activity.prs(state=state or None, author=author or None, before=before,
                              limit=limit)  # fmt: skip


@api.get("/prs/{number}", summary="A PR: description, diff, reviews, merge and conflict history")
def pr(number: IdPath, views: ViewsDep) -> dict[str, Any]:
    return views.activity.pr(number)


@api.get("/channel", summary="A channel's messages, newest first")
def channel(
    views: ViewsDep,
    name: str = TASKS_CHANNEL,
    before: IdQuery = None,
    limit: int | None = Query(None, ge=1, le=500),
) -> dict[str, Any]:
    return views.queries.channel(name, before=before, limit=limit)


@api.get(
    "/threads",
    summary="Direct-message threads, most recently active first",
    dependencies=[Depends(no_worker)],
)
def threads(views: ViewsDep, limit: int | None = Query(None, ge=1, le=500)) -> dict[str, Any]:
    return views.queries.threads(limit=limit)


@api.get(
    "/thread",
    summary="The direct messages between two correspondents, newest first",
    dependencies=[Depends(no_worker)],
)
def thread(
    views: ViewsDep,
    a: str,
    b: str,
    before: IdQuery = None,
    limit: int | None = Query(None, ge=1, le=500),
) -> dict[str, Any]:
    return views.queries.thread(a, b, before=before, limit=limit)


@api.get("/workers/{name}", summary="One worker's timeline: sessions, entries, messages, PRs")
def timeline(name: str, views: ViewsDep, before: TimeQuery = None) -> dict[str, Any]:
    return views.activity.timeline(name, before=before)


def mount(app: FastAPI, runtime: Runtime) -> None:
    """Serve the dashboard at /dashboard, its JSON at /dashboard/api, its assets at /static."""
    views = Views(runtime)
    app.state.dashboard = views
    # Added to the app's own route list, as the hub does for its routers (see app._add_routes).
    app.router.routes.extend(pages.routes)
    app.router.routes.extend(api.routes)
    app.mount("/dashboard/static", StaticFiles(directory=HERE / "static"), name="dashboard-static")
    threading.Thread(target=_quietly(views.warm), name="dashboard-warm", daemon=True).start()


def _quietly(job: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        # A failed warm-up (e.g. the hub stopping at once) only means the first poll counts.
        with contextlib.suppress(Exception):
            job()

    return run
