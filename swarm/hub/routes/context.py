"""Shared-context routes: record entries, claims, grep, show, tail, feed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from swarm.bootstrap import Runtime
from swarm.context import EntryType, parse_type
from swarm.context.model import AppendResult
from swarm.errors import InvalidInput
from swarm.hub import serialize
from swarm.hub.delivery import answer, direct_messages
from swarm.hub.deps import CurrentWorker, Reader, RuntimeDep, bad_request, needs, short_call
from swarm.hub.edge import IdPath, IdQuery, TimeQuery
from swarm.hub.group_commit import GroupCommit
from swarm.hub.limits import limited
from swarm.messages.ports import Message
from swarm.registry import Worker
from swarm.switches import require

router = APIRouter(prefix="/v1", tags=["context"])


class EntryIn(BaseModel):
    type: str = Field(description="OBSERVED, FACT, FAIL, CLAIM or PATCH_SUMMARY")
    body: str = Field(description="What you observed, established, tried or changed")
    # Typed loosely on purpose: the store checks them and says exactly what was wrong.
    scope: Any = Field(default=None, description='Paths, globs or "topic:<name>" items')
    refs: Any = Field(default=None, description="Ids of earlier entries this one refers to")
    lease_seconds: float | None = Field(default=None, description="For a CLAIM: its lease")


class RenewIn(BaseModel):
    lease_seconds: float | None = None


def _notify_overlaps(runtime: Runtime, claimer: Worker, made: AppendResult) -> None:
    """Tell the owner of each overlapping claim, by a DM from the hub, naming both claims."""
    new = runtime.context.claim(made.entry.id)
    for other in made.overlaps:
        owner = runtime.registry.by_name(other.owner)
        runtime.messages.direct(
            "hub",
            owner,
            f"{claimer.name}'s new claim #{new.id} ({', '.join(new.scope)}: "
            f"{' '.join(new.body.split())[:120]}) "
            f"overlaps your claim #{other.id} ({', '.join(other.scope)}). Agree with "
            f"{claimer.name} who does what: `sw dm {claimer.name} ...`; then release or narrow "
            f"yours (`sw release {other.id}`) or ask them to release theirs.",
        )


@router.post(
    "/entries",
    summary="Record an entry (a CLAIM also opens a claim)",
    response_model=None,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": EntryIn.model_json_schema()}},
        }
    },
    responses={
        200: {
            "description": "The entry, the claims it overlaps or ends, and the delivery block",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
)
async def record(worker: CurrentWorker, request: Request) -> Response:
    # The hub's hottest call, so it skips FastAPI's body and response handling (13% of the
    # call's CPU, measured in-process): pydantic checks the JSON in one pass, and the answer is
    # put together from each entry's JSON, made once (see serialize.AnswerJSON).
    runtime: Runtime = request.app.state.runtime
    try:
        body = EntryIn.model_validate_json(await request.body())
    except ValidationError as exc:
        raise InvalidInput(bad_request(exc.errors(), in_body=True)) from None
    # A CLAIM is the claims mechanism; every other type is the shared context.
    is_claim = isinstance(body.type, str) and body.type.strip().upper() == EntryType.CLAIM.value
    require(runtime.settings.switches, "claims" if is_claim else "context")
    now = runtime.clock()
    pending = runtime.context.prepare(
        worker.id, body.type, body.body, body.scope, body.refs, body.lease_seconds, worker.name
    )
    # Written with the other calls that arrive meanwhile, in one transaction that also takes
    # the caller's delivery block (see swarm.hub.group_commit).
    group_commit: GroupCommit = request.app.state.group_commit
    written = await group_commit.append(pending)
    dms: Sequence[Message] = written.delivery.messages
    if not runtime.deliverer.with_messages:  # DMs live on another server: a network call
        dms = await run_in_threadpool(direct_messages, runtime, worker, written.delivery)
    encode: serialize.AnswerJSON = request.app.state.answer_json
    reply = encode.answer(
        encode.appended(written.result, now), encode.delivery(written.delivery.entries, dms)
    )
    if written.result.overlaps and "dms" not in runtime.settings.switches:
        await run_in_threadpool(_notify_overlaps, runtime, worker, written.result)
    return Response(reply, media_type="application/json")


@router.get(
    "/entries/{entry_id}",
    summary="One entry, and the entries that refer to it",
    dependencies=[needs("context")],
)
def show(entry_id: IdPath, reader: Reader, runtime: RuntimeDep) -> dict[str, Any]:
    entry = runtime.context.get(entry_id)
    result: dict[str, Any] = {
        "entry": serialize.entry(entry),
        "referrers": [serialize.entry(e) for e in runtime.context.referrers(entry_id)],
    }
    if entry.type is EntryType.CLAIM:
        result["claim"] = serialize.claim(runtime.context.claim(entry_id), runtime.clock())
    return _maybe_answer(runtime, reader, result)


@router.get(
    "/entries", summary="The newest entries (newest first)", dependencies=[needs("context")]
)
def tail(
    reader: Reader,
    runtime: RuntimeDep,
    limit: int = Query(20, ge=1, le=500),
    type: list[str] = Query(default=[]),
    author: str | None = None,
) -> dict[str, Any]:
    types = [parse_type(t) for t in type]
    author_id = runtime.registry.by_name(author).id if author else None
    rows = runtime.context.tail(limit, types=types, author_id=author_id)
    return _maybe_answer(runtime, reader, {"entries": [serialize.entry(e) for e in rows]})


@router.get(
    "/grep",
    summary="Search the whole history with a regular expression (RE2)",
    dependencies=[needs("context", "grep"), limited("grep")],
)
def grep(
    reader: Reader,
    runtime: RuntimeDep,
    pattern: str,
    ignore_case: bool = False,
    type: list[str] = Query(default=[]),
    author: str | None = None,
    since: TimeQuery = None,
    until: TimeQuery = None,
    after: IdQuery = None,
    before: IdQuery = None,
    limit: int = Query(20, ge=1, le=500),
) -> dict[str, Any]:
    types = [parse_type(t) for t in type]
    author_id = runtime.registry.by_name(author).id if author else None
    found = runtime.context.grep(
        pattern,
        ignore_case=ignore_case,
        types=types,
        author_id=author_id,
        since=since,
        until=until,
        after_id=after,
        before_id=before,
        limit=limit,
    )
    result = {
        "entries": [serialize.entry(e) for e in found.entries],
        "truncated": found.truncated,
        "indexed": found.used_index,
    }
    return _maybe_answer(runtime, reader, result)


@router.get(
    "/feed",
    summary="Every peer entry since your cursor, oldest first (exact, paged)",
    dependencies=[needs("context"), limited("feed")],
)
def feed(
    worker: CurrentWorker, runtime: RuntimeDep, limit: int = Query(100, ge=1, le=1000)
) -> dict[str, Any]:
    rows = runtime.context.feed(worker.id, limit)
    dms = runtime.messages.take_direct(worker)
    return {
        "result": {"entries": [serialize.entry(e) for e in rows]},
        "delivery": {"entries": [], "more": 0, "messages": [serialize.message(m) for m in dms]},
    }


@router.get(
    "/claims",
    summary="Active claims (or, with all=true, recent claims of any state)",
    dependencies=[needs("claims")],
)
@short_call
def list_claims(
    reader: Reader,
    runtime: RuntimeDep,
    all: bool = False,
    mine: bool = False,
    owner: str | None = None,
    limit: int = Query(500, ge=1, le=5000),
) -> dict[str, Any]:
    owner_id = None
    if mine and reader is not None:
        owner_id = reader.id
    elif owner:
        owner_id = runtime.registry.by_name(owner).id
    rows = runtime.context.claims(include_ended=all, owner_id=owner_id, limit=limit)
    now = runtime.clock()
    return _maybe_answer(runtime, reader, {"claims": [serialize.claim(c, now) for c in rows]})


@router.post(
    "/claims/{claim_id}/renew",
    summary="Extend your claim's lease from now",
    dependencies=[needs("claims")],
)
@short_call
def renew(
    claim_id: IdPath, body: RenewIn, worker: CurrentWorker, runtime: RuntimeDep
) -> dict[str, Any]:
    claim = runtime.context.renew(worker.id, claim_id, body.lease_seconds)
    return answer(runtime, worker, {"claim": serialize.claim(claim, runtime.clock())})


@router.post(
    "/claims/{claim_id}/release",
    summary="End your claim without a result",
    dependencies=[needs("claims")],
)
@short_call
def release(claim_id: IdPath, worker: CurrentWorker, runtime: RuntimeDep) -> dict[str, Any]:
    claim = runtime.context.release(worker.id, claim_id)
    return answer(runtime, worker, {"claim": serialize.claim(claim, runtime.clock())})


def _maybe_answer(runtime: Runtime, reader: Worker | None, result: Any) -> dict[str, Any]:
    if reader is None:  # the operator has no cursor
        return {"result": result, "delivery": None}
    return answer(runtime, reader, result)
