"""The hub's OpenAPI document, made to tell the truth about what every route may answer: the
bearer security scheme, and the error statuses the edge, the dependencies and the project's
errors produce, each with the one error body the hub sends (`{"error", "kind"}`)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error", "kind"],
    "properties": {
        "error": {"type": "string", "description": "What was wrong and what to do"},
        "kind": {"type": "string", "description": "InvalidInput, NotFound, Conflict, ..."},
        "files": {"type": "array", "items": {"type": "string"}},
        "output": {"type": "string"},
    },
}
ERRORS = {
    "400": "The body is not JSON",
    "401": "No token, or an unknown one",
    "403": "The token may not do this",
    "404": "No such item",
    "409": "The current state refuses it (nothing changed)",
    "413": "The body is over SWARM_MAX_BODY_BYTES (refused before it was read)",
    "422": "Malformed input: the message says which field and why (nothing changed)",
    "429": "Rate limit of this worker for this call; see Retry-After",
    "503": "A backing service is unavailable",
    "507": "The hub's disk is full (the write was not stored) or nearly full (no new work): "
    "retry once space returns",
}
OPEN = {"/health", "/dashboard", "/openapi.json"}  # no token needed


def install(app: FastAPI) -> None:
    def build() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        components = schema.setdefault("components", {})
        components.setdefault("schemas", {})["Error"] = ERROR_SCHEMA
        components["securitySchemes"] = {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "A worker's token, the operator token (or a viewer token for "
                "the dashboard's JSON)",
            }
        }
        error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
        for path, operations in schema.get("paths", {}).items():
            for operation in operations.values():
                responses = operation.setdefault("responses", {})
                if path not in OPEN:
                    operation["security"] = [{"bearer": []}]
                for status, description in ERRORS.items():
                    # FastAPI's own 422 body is not what the hub sends (see app._bad_request).
                    if status == "422" or status not in responses:
                        responses[status] = {"description": description, "content": error}
        app.openapi_schema = schema
        return schema

    app.openapi = build  # type: ignore[method-assign]
