"""Workspace routes: pull requests (open, list, show, review, merge, close) and git over HTTP."""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any, cast

from fastapi import APIRouter, FastAPI, Query
from pydantic import BaseModel, Field

from swarm.bootstrap import Runtime
from swarm.errors import Unavailable
from swarm.hub.delivery import answer
from swarm.hub.deps import CurrentWorker, Reader, RuntimeDep
from swarm.registry import Worker
from swarm.workspace.ports import PRState, PullRequest, PullRequestDetail, Verdict, Workspace

router = APIRouter(prefix="/v1", tags=["workspace"])
OPERATOR = Worker(0, "operator")


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
    return answer(runtime, worker, {"pr": pr_dict(pr)})


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
def show_pr(number: int, reader: Reader, runtime: RuntimeDep) -> dict[str, Any]:
    result = detail_dict(_workspace(runtime).get_pr(number))
    return answer(runtime, reader, result) if reader else {"result": result, "delivery": None}


@router.post("/prs/{number}/reviews", summary="Review: approve, request_changes or comment")
def review(
    number: int, body: ReviewIn, worker: CurrentWorker, runtime: RuntimeDep
) -> dict[str, Any]:
    verdict = cast(Verdict, body.verdict)  # the workspace checks it and says what is allowed
    made = _workspace(runtime).review(worker, number, verdict, body.body)
    return answer(runtime, worker, {"review": dataclasses.asdict(made)})


@router.post("/prs/{number}/merge", summary="Merge into main (atomic; refused on conflict)")
def merge(number: int, worker: CurrentWorker, runtime: RuntimeDep) -> dict[str, Any]:
    pr = _workspace(runtime).merge(worker, number)
    return answer(runtime, worker, {"pr": pr_dict(pr)})


@router.post("/prs/{number}/close", summary="Close without merging")
def close(number: int, worker: CurrentWorker, runtime: RuntimeDep) -> dict[str, Any]:
    pr = _workspace(runtime).close(worker, number)
    return answer(runtime, worker, {"pr": pr_dict(pr)})


def mount(app: FastAPI, runtime: Runtime) -> None:
    """The PR routes, and git's smart HTTP when the workspace is the embedded repository."""
    if runtime.workspace is None:
        return
    app.include_router(router)
    if hasattr(runtime.workspace, "git_dir"):
        from swarm.workspace.git_http import git_router

        def authenticate(token: str) -> Worker:
            if secrets.compare_digest(token.encode(), runtime.operator_token.encode()):
                return OPERATOR  # a person may clone and fetch (the hook refuses its pushes)
            return runtime.registry.authenticate(token)

        app.include_router(git_router(runtime.workspace, authenticate))  # type: ignore[arg-type]
