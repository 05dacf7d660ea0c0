"""`POST /v1/oracle`: run the task's original program for a worker and return what it printed.

The program runs outside every agent's sandbox, in one of its own (swarm.tasks.rebuild.
oracle_run); the answer holds its exit status, stdout and stderr, never its bytes. Input is
checked here before anything runs (argument count and size, NUL, stdin and file sizes, file
names); calls are rate-limited per worker and bounded for the whole hub.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import threading
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from swarm.config import Settings
from swarm.errors import InvalidInput, NotFound, RateLimited, SwarmError
from swarm.hub.delivery import answer
from swarm.hub.deps import Reader, RuntimeDep
from swarm.hub.limits import limited
from swarm.tasks.rebuild.oracle import published_oracle
from swarm.tasks.rebuild.oracle_run import OracleLimits, OracleRequest, OracleResult, run_oracle

router = APIRouter(prefix="/v1", tags=["oracle"])
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_SLOTS_LOCK = threading.Lock()


class TooLarge(SwarmError):
    status = 413


class OracleIn(BaseModel):
    args: list[str] = Field(default_factory=list, description="The program's arguments")
    stdin: str | None = Field(default=None, description="Standard input, as text")
    stdin_base64: str | None = Field(default=None, description="Standard input, as base64")
    files: dict[str, str] = Field(
        default_factory=dict, description="name -> base64 content, put in its working folder"
    )
    timeout: float | None = Field(default=None, gt=0, description="Seconds, at most the hub's")


def _decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{what} is not valid base64") from None


def parse_request(body: OracleIn, settings: Settings) -> OracleRequest:
    """The run `body` asks for, or the first thing wrong with it (nothing runs then)."""
    if len(body.args) > settings.oracle_max_args:
        raise InvalidInput(
            f"{len(body.args)} arguments; at most {settings.oracle_max_args} "
            "(SWARM_ORACLE_MAX_ARGS): put data on standard input or in a file"
        )
    for index, arg in enumerate(body.args):
        if "\x00" in arg:
            raise InvalidInput(f"argument {index} contains a NUL character, which no argv holds")
    arg_bytes = sum(len(a.encode("utf-8", "surrogatepass")) + 1 for a in body.args)
    if arg_bytes > settings.oracle_max_arg_bytes:
        raise TooLarge(
            f"the arguments hold {arg_bytes} bytes; at most {settings.oracle_max_arg_bytes} "
            "(SWARM_ORACLE_MAX_ARG_BYTES): put data on standard input or in a file"
        )
    if body.stdin is not None and body.stdin_base64 is not None:
        raise InvalidInput("give stdin or stdin_base64, not both")
    stdin = (
        _decode(body.stdin_base64, "stdin_base64")
        if body.stdin_base64 is not None
        else (body.stdin or "").encode("utf-8")
    )
    if len(body.files) > settings.oracle_max_files:
        raise InvalidInput(
            f"{len(body.files)} files; at most {settings.oracle_max_files} (SWARM_ORACLE_MAX_FILES)"
        )
    files: dict[str, bytes] = {}
    for name, content in body.files.items():
        if not _FILE_NAME.fullmatch(name) or name in (".", ".."):
            raise InvalidInput(
                f"file name {name!r}: a plain name (letters, digits, . _ -; no folders), "
                "as the program will find it in its working folder"
            )
        files[name] = _decode(content, f"files[{name!r}]")
    size = len(stdin) + sum(len(c) for c in files.values())
    if size > settings.oracle_max_input_bytes:
        raise TooLarge(
            f"standard input and files hold {size} bytes; at most "
            f"{settings.oracle_max_input_bytes} (SWARM_ORACLE_MAX_INPUT_BYTES): try a smaller case"
        )
    timeout = body.timeout
    if timeout is not None and not math.isfinite(timeout):
        raise InvalidInput("timeout must be a finite number of seconds")
    return OracleRequest(tuple(body.args), stdin, files, timeout)


def _slots(request: Request, settings: Settings) -> threading.BoundedSemaphore:
    with _SLOTS_LOCK:
        slots: threading.BoundedSemaphore | None = getattr(request.app.state, "oracle_slots", None)
        if slots is None:
            slots = threading.BoundedSemaphore(settings.oracle_concurrency)
            request.app.state.oracle_slots = slots
    return slots


def _stream(name: str, data: bytes) -> dict[str, str]:
    """Text when it is UTF-8, else base64 (the bytes as they were)."""
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_base64": base64.b64encode(data).decode("ascii")}


def serialize(program: str, result: OracleResult, limits: OracleLimits) -> dict[str, Any]:
    return {
        "program": program,
        "exit_code": result.exit_code,
        **_stream("stdout", result.stdout),
        **_stream("stderr", result.stderr),
        "timed_out": result.timed_out,
        "truncated": result.truncated,
        "seconds": result.seconds,
        "limits": {"seconds": limits.seconds, "max_output_bytes": limits.max_output_bytes},
    }


@router.post(
    "/oracle",
    summary="Run the task's original program (the oracle) and return what it printed",
    dependencies=[limited("oracle")],
    responses={
        404: {"description": "This run's task has no oracle"},
        413: {"description": "Arguments, stdin or files over the hub's limits"},
        429: {"description": "This worker's oracle rate, or every oracle slot is busy"},
        503: {"description": "The hub cannot sandbox the oracle here"},
    },
)
def oracle(reader: Reader, runtime: RuntimeDep, request: Request, body: OracleIn) -> Any:
    settings = runtime.settings
    program = published_oracle(settings.run_dir)
    if program is None:
        raise NotFound(
            "this run's task has no oracle: there is no original program to run; "
            "read the goal and the documentation instead"
        )
    wanted = parse_request(body, settings)
    limits = OracleLimits(
        seconds=settings.oracle_timeout_seconds, max_output_bytes=settings.oracle_max_output_bytes
    )
    slots = _slots(request, settings)
    if not slots.acquire(timeout=limits.seconds):
        raise RateLimited(
            f"the oracle is busy: {settings.oracle_concurrency} runs at once for the whole team "
            "(SWARM_ORACLE_CONCURRENCY); try again in a few seconds",
            retry_after=2.0,
        )
    try:
        result = run_oracle(program, wanted, limits, sandbox=settings.oracle_sandbox)
    finally:
        slots.release()
    shown = serialize(program.program, result, limits)
    if reader is None:
        return {"result": shown, "delivery": None}
    return answer(runtime, reader, shown)
