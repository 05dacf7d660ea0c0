"""A small client for the hub's HTTP API, shared by `sw`, the worker runtime and the tests."""

from __future__ import annotations

import os
from typing import Any

import httpx

DEFAULT_TIMEOUT = 60.0


class HubError(Exception):
    """The hub refused a call; `message` is its explanation."""

    def __init__(self, message: str, status: int = 0, payload: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.payload = payload or {}


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
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )

    @classmethod
    def from_env(cls) -> HubClient:
        url = os.environ.get("SWARM_HUB_URL")
        token = os.environ.get("SWARM_TOKEN")
        if not url or not token:
            missing = [n for n, v in (("SWARM_HUB_URL", url), ("SWARM_TOKEN", token)) if not v]
            raise HubError(
                f"{' and '.join(missing)} not set: the worker runtime sets them; "
                "by hand, export SWARM_HUB_URL=http://127.0.0.1:8765 and SWARM_TOKEN=<token>"
            )
        return cls(url, token)

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
    ) -> dict[str, Any]:
        """One call; answers the hub's JSON (`result` and `delivery`) or raises HubError."""
        clean = {k: v for k, v in (params or {}).items() if v is not None and v != []}
        try:
            response = self._http.request(method, path, json=json, params=clean)
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise HubUnreachable(f"cannot reach the hub at {self.base_url}: {reason}") from exc
        try:
            data: dict[str, Any] = response.json()
        except ValueError:
            data = {"error": response.text[:300] or response.reason_phrase}
        if response.status_code >= 400:
            message = data.get("error") or data.get("detail") or response.reason_phrase
            raise HubError(str(message), response.status_code, data)
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
