"""A small client for the hub's HTTP API, shared by `sw`, the worker runtime and the tests.

Every call rides out a hub restart or a database blip: connection errors and 5xx answers are
retried with jittered exponential backoff for up to SWARM_HUB_RETRY_SECONDS (default 60). A
429 (this worker's rate limit on an expensive call) is retried after the `Retry-After` the hub
gave, when that fits in the same time. Every
write carries an `Idempotency-Key` that stays the same across its retries; the hub remembers the
answer under it (swarm.hub.idempotency), so a retried append, PR open, review or merge is applied
once and answers the same.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Callable
from typing import Any

import httpx
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)
from tenacity.wait import wait_base

DEFAULT_TIMEOUT = 60.0
DEFAULT_RETRY_SECONDS = 60.0
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
IDEMPOTENCY_HEADER = "Idempotency-Key"
# Set on the second and later attempts: only then can the hub have seen the key before.
ATTEMPT_HEADER = "Idempotency-Attempt"


def retry_seconds() -> float:
    raw = os.environ.get("SWARM_HUB_RETRY_SECONDS", "")
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_RETRY_SECONDS
    except ValueError:
        return DEFAULT_RETRY_SECONDS


def retryable(exc: BaseException) -> bool:
    """A refused connection, a timeout, a 5xx or a rate limit: the same call may well succeed
    later."""
    if isinstance(exc, HubUnreachable):
        return True
    return isinstance(exc, HubError) and (exc.status >= 500 or exc.retry_after is not None)


class HubError(Exception):
    """The hub refused a call; `message` is its explanation."""

    def __init__(
        self,
        message: str,
        status: int = 0,
        payload: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.payload = payload or {}
        # Seconds the hub asked to wait (a 429's Retry-After), when it asked.
        self.retry_after = retry_after


class _WaitAsTold(wait_base):
    """The hub's Retry-After for a rate limit (with a little jitter, so the workers it held
    back do not all come back at once); backoff for everything else."""

    def __init__(self) -> None:
        self.backoff = wait_random_exponential(multiplier=0.25, max=5.0)

    def __call__(self, retry_state: RetryCallState) -> float:
        error = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(error, HubError) and error.retry_after is not None:
            return error.retry_after + random.uniform(0.0, 0.5)
        return float(self.backoff(retry_state))


class HubUnreachable(HubError):
    """No answer from the hub at all (down, wrong URL, network)."""


class HubClient:
    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry_for: float | None = None,
        on_wait: Callable[[HubError, float], None] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        # Seconds a call keeps retrying (0: one attempt); on_wait(error, seconds) before a retry.
        self.retry_for = retry_seconds() if retry_for is None else retry_for
        self.on_wait = on_wait
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )

    @classmethod
    def from_env(cls, **options: Any) -> HubClient:
        url = os.environ.get("SWARM_HUB_URL")
        token = os.environ.get("SWARM_TOKEN")
        if not url or not token:
            missing = [n for n, v in (("SWARM_HUB_URL", url), ("SWARM_TOKEN", token)) if not v]
            raise HubError(
                f"{' and '.join(missing)} not set: the worker runtime sets them; "
                "by hand, export SWARM_HUB_URL=http://127.0.0.1:8765 and SWARM_TOKEN=<token>"
            )
        return cls(url, token, **options)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HubClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        retry: bool = True,
    ) -> dict[str, Any]:
        """One call, retried while the hub is down or failing (see the module's docstring);
        answers the hub's JSON (`result` and `delivery`) or raises HubError."""
        clean = {k: v for k, v in (params or {}).items() if v is not None and v != []}
        headers: dict[str, str] = {}
        if method.upper() in WRITES:
            headers[IDEMPOTENCY_HEADER] = uuid.uuid4().hex
        if not retry or self.retry_for <= 0:
            return self._once(method, path, json, clean, headers)
        attempts = Retrying(
            retry=retry_if_exception(lambda exc: retryable(exc) and self._fits(exc)),
            stop=stop_after_delay(self.retry_for),
            wait=_WaitAsTold(),
            before_sleep=self._waiting,
            reraise=True,
        )
        for attempt in attempts:
            with attempt:
                number = attempt.retry_state.attempt_number
                if number > 1 and headers:
                    headers[ATTEMPT_HEADER] = str(number)
                return self._once(method, path, json, clean, headers)
        raise AssertionError("unreachable: tenacity re-raises the last error")  # pragma: no cover

    def _fits(self, exc: BaseException) -> bool:
        """A rate limit is waited out only when the wait fits in the retry time."""
        wait = getattr(exc, "retry_after", None)
        return wait is None or wait <= self.retry_for

    def _waiting(self, state: RetryCallState) -> None:
        if self.on_wait is None or state.outcome is None or state.next_action is None:
            return
        error = state.outcome.exception()
        if isinstance(error, HubError):
            self.on_wait(error, state.next_action.sleep)

    def _once(
        self,
        method: str,
        path: str,
        json: Any,
        params: dict[str, Any],
        headers: dict[str, str],
    ) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, json=json, params=params, headers=headers)
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise HubUnreachable(f"cannot reach the hub at {self.base_url}: {reason}") from exc
        try:
            data: dict[str, Any] = response.json()
        except ValueError:
            data = {"error": response.text[:300] or response.reason_phrase}
        if response.status_code >= 400:
            message = data.get("error") or data.get("detail") or response.reason_phrase
            retry_after = None
            if response.status_code == 429:
                try:
                    retry_after = max(0.0, float(response.headers.get("Retry-After", "")))
                except ValueError:
                    retry_after = 1.0  # a 429 that does not say how long: a short wait
            raise HubError(str(message), response.status_code, data, retry_after)
        return data

    # Typed shortcuts used by the runtime and tests (sw uses `call` directly for its options).
    def record(self, type: str, body: str, **fields: Any) -> dict[str, Any]:
        return self.call("POST", "/v1/entries", json={"type": type, "body": body, **fields})

    def register(self, model: str | None = None) -> dict[str, Any]:
        return self.call("POST", "/v1/workers", json={"model": model})["result"]  # type: ignore[no-any-return]

    def report(self, state: str, status: dict[str, Any]) -> None:
        self.call("POST", "/v1/status", json={"state": state, "status": status})

    def inbox(self) -> dict[str, Any]:
        return self.call("GET", "/v1/inbox")
