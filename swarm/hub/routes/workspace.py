"""Workspace routes: pull requests (open, list, show, review, merge, close) and git over HTTP."""

from __future__ import annotations

import dataclasses
import secrets
from typing import TYPE_CHECKING, Any, cast

from fastapi import APIRouter, FastAPI, Query
from pydantic import BaseModel, Field

from swarm.bootstrap import Runtime
from swarm.errors import Unavailable
from swarm.hub.delivery import answer
from swarm.hub.deps import CurrentWorker, Reader, RuntimeDep, needs
from swarm.hub.edge import MAX_ID, IdPath
from swarm.hub.limits import RateLimits
from swarm.registry import Worker

if TYPE_CHECKING:
    from swarm.workspace.local import LocalWorkspace
from swarm.workspace.ports import (
    OPERATOR,
    PRState,
    PullRequest,
    PullRequestDetail,
    Verdict,
    Workspace,
)

router = APIRouter(prefix="/v1", tags=["workspace"])


class OpenIn(BaseModel):
    branch: str = Field(description="Your pushed branch, e.g. w3/parser")
    title: str
    body: str = ""


class ReviewIn(BaseModel):
    verdict: str = Field(description="approve, request_changes or comment")
    body: str = ""


def _workspace(runtime: Runtime) -> Workspace:
    if runtime.workspace is None:
        raise Unavailable("this hub runs without a workspace")
    return runtime.workspace


def pr_dict(pr: PullRequest) -> dict[str, Any]:
    return dataclasses.asdict(pr)


def detail_dict(detail: PullRequestDetail) -> dict[str, Any]:
    return {
        "pr": pr_dict(detail.pr),
        "diff": detail.diff,
        "files": list(detail.files),
        "reviews": [dataclasses.asdict(r) for r in detail.reviews],
        "mergeable": detail.mergeable,
        "conflicts": list(detail.conflicts),
        "events": list(detail.events),
    }


@router.get("/workspace", summary="Where to clone from, and main's current commit")
def where(worker: CurrentWorker, runtime: RuntimeDep) -> dict[str, Any]:
    ws = _workspace(runtime)
    result = {"clone_url": ws.clone_url(worker), "main": ws.main_head()}
    return answer(runtime, worker, result)


@router.post("/prs", summary="Open a pull request from your pushed branch")
def open_pr(body: OpenIn, worker: CurrentWorker, runtime: RuntimeDep) -> dict[str, Any]:
    pr = _workspace(runtime).open_pr(worker, body.branch, body.title, body.body)
    result: dict[str, Any] = {"pr": pr_dict(pr)}
    local = _local(runtime)
    if local is not None:
        from swarm.workspace.takeover import supersede

        # Abandoned PRs of the same work, which the opener claims, are closed and linked.
        result["superseded"] = supersede(local, worker, pr, _held(runtime, worker))
    return answer(runtime, worker, result)


@router.get("/prs", summary="Pull requests, newest first")
def list_prs(
    reader: Reader,
    runtime: RuntimeDep,
    state: str | None = Query(None, description="open, merged or closed"),
    author: str | None = Query(None, description="A worker name, e.g. w3"),
    limit: int = Query(50, ge=1, le=500),
) -> dict[str, Any]:
    wanted = cast(PRState | None, state)  # checked by the workspace
    prs = _workspace(runtime).list_prs(state=wanted, author=author, limit=limit)
    result = {"prs": [pr_dict(p) for p in prs]}
    return answer(runtime, reader, result) if reader else {"result": result, "delivery": None}


@router.get("/prs/{number}", summary="A pull request: diff against main, reviews, mergeability")
def show_pr(number: IdPath, reader: Reader, runtime: RuntimeDep) -> dict[str, Any]:
    result = detail_dict(_workspace(runtime).get_pr(number))
    return answer(runtime, reader, result) if reader else {"result": result, "delivery": None}


@router.post(
    "/prs/{number}/reviews",
    summary="Review: approve, request_changes or comment",
    dependencies=[needs("reviews")],
)
def review(
    number: IdPath, body: ReviewIn, worker: CurrentWorker, runtime: RuntimeDep
) -> dict[str, Any]:
    verdict = cast(Verdict, body.verdict)  # the workspace checks it and says what is allowed
    made = _workspace(runtime).review(worker, number, verdict, body.body)
    return answer(runtime, worker, {"review": dataclasses.asdict(made)})


class MergeIn(BaseModel):
    claim: int | None = Field(
        default=None,
        ge=0,
        le=MAX_ID,
        description="The claim this work is done under: refused if it lapsed (fencing)",
    )


@router.post(
    "/prs/{number}/merge",
    summary="Merge into main (atomic; refused on conflict). Any worker may merge; the "
    "operator's merge overrides requested changes and missing approvals",
)
def merge(
    number: IdPath, reader: Reader, runtime: RuntimeDep, body: MergeIn | None = None
) -> dict[str, Any]:
    if reader is not None and body is not None and body.claim is not None:
        runtime.context.check_fence(reader.id, body.claim)
    pr = _workspace(runtime).merge(reader or OPERATOR, number)
    return _answer(runtime, reader, {"pr": pr_dict(pr)})


@router.post("/prs/{number}/close", summary="Close without merging (its author or the operator)")
def close(number: IdPath, reader: Reader, runtime: RuntimeDep) -> dict[str, Any]:
    pr = _workspace(runtime).close(reader or OPERATOR, number)
    return _answer(runtime, reader, {"pr": pr_dict(pr)})


class TakeIn(BaseModel):
    branch: str | None = Field(
        default=None,
        max_length=255,
        description="Your pushed branch to continue from (default: the hub copies the PR's "
        "branch to <you>/<its topic>)",
    )


@router.post(
    "/prs/{number}/take",
    summary="Take over an abandoned PR whose files you claim: a PR of yours replaces it",
    dependencies=[needs("claims")],  # taking the work over is claiming it
)
def take(
    number: IdPath, worker: CurrentWorker, runtime: RuntimeDep, body: TakeIn | None = None
) -> dict[str, Any]:
    local = _local(runtime)
    if local is None:
        raise Unavailable(
            "taking over a PR works on the embedded workspace; here, push its branch to one of "
            "yours and open a PR (sw pr open)"
        )
    from swarm.workspace.takeover import take_over

    pr = take_over(
        local,
        worker,
        number,
        _held(runtime, worker),
        branch=body.branch if body else None,
        max_branches=runtime.settings.git_max_refs_per_worker,
    )
    return answer(runtime, worker, {"pr": pr_dict(pr), "took_over": number})


def _local(runtime: Runtime) -> LocalWorkspace | None:
    from swarm.workspace.local import LocalWorkspace

    ws = runtime.workspace
    return ws if isinstance(ws, LocalWorkspace) else None


def _held(runtime: Runtime, worker: Worker) -> list[tuple[str, ...]]:
    """The scopes of the worker's active claims."""
    return [tuple(c.scope) for c in runtime.context.claims(owner_id=worker.id)]


def _answer(runtime: Runtime, reader: Worker | None, result: dict[str, Any]) -> dict[str, Any]:
    return answer(runtime, reader, result) if reader else {"result": result, "delivery": None}


def mount(app: FastAPI, runtime: Runtime) -> None:
    """The PR routes, and git's smart HTTP when the workspace is the embedded repository."""
    if runtime.workspace is None:
        return
    app.include_router(router)
    if hasattr(runtime.workspace, "git_dir"):
        from swarm.workspace.git_http import GitLimits, git_router

        def authenticate(token: str) -> Worker:
            if secrets.compare_digest(token.encode(), runtime.operator_token.encode()):
                return OPERATOR  # a person may clone and fetch (the hook refuses its pushes)
            return runtime.registry.authenticate(token)

        settings = runtime.settings
        limits = GitLimits(
            max_push_bytes=settings.git_max_push_bytes,
            max_blob_bytes=settings.git_max_blob_bytes,
            max_refs_per_worker=settings.git_max_refs_per_worker,
            repo_quota_bytes=settings.git_repo_quota_bytes,
        )
        rates: RateLimits = app.state.rate_limits

        def throttle(worker: Worker) -> float:
            return 0.0 if worker == OPERATOR else rates.wait("git", worker)

        disk = getattr(app.state, "disk", None)  # swarm.hub.diskguard.DiskWatch
        git = git_router(
            runtime.workspace,  # type: ignore[arg-type]
            authenticate,
            limits=limits,
            throttle=throttle,
            on_full=disk.failed if disk is not None else None,
        )
        app.include_router(git)
