"""A scripted OpenAI-compatible chat server on loopback: real HTTP, no model (tests and demos).

Each request to `/v1/chat/completions` is answered with the next command of the script, as a
`bash` tool call (or, when the client sends no tools, as a fenced `mswea_bash_command` block),
with a `usage` block. When the script runs out it answers mini-swe-agent's submit command.
`failures` answers chosen requests with an OpenAI-style error instead (e.g. 400 with code
`context_length_exceeded`, which litellm turns into ContextWindowExceededError).
Reach it through litellm as `model="openai/scripted"`, `api_base=server.url`, any API key.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import uvicorn
from fastapi import Body, FastAPI
from fastapi.responses import JSONResponse

from swarm.hub.server import free_port

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

# Called with (request number from 1, request body) before the answer is chosen.
RequestHook = Callable[[int, dict[str, Any]], None]


def count_tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: one token per four characters."""
    return max(1, math.ceil(len(text) / 4))


class ScriptedModelServer:
    """Serves scripted answers; keeps every request body and the usage it reported."""

    def __init__(
        self,
        commands: Iterable[str] = (),
        *,
        on_request: RequestHook | None = None,
        failures: Mapping[int, tuple[int, str, str]] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.commands = list(commands)
        self.on_request = on_request
        self.failures = dict(failures or {})  # request number -> (HTTP status, code, message)
        self.host = host
        self.port = port or free_port(host)
        self.requests: list[dict[str, Any]] = []
        self.usages: list[dict[str, int]] = []
        self._lock = threading.Lock()
        self.app = self._build_app()
        self.server = uvicorn.Server(
            uvicorn.Config(
                self.app, host=self.host, port=self.port, log_level="warning", lifespan="off"
            )
        )
        self.thread = threading.Thread(target=self.server.run, name="scripted-model", daemon=True)

    @property
    def url(self) -> str:
        """The OpenAI-style base URL (ends in /v1), for `api_base`."""
        return f"http://{self.host}:{self.port}/v1"

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="scripted model")

        @app.get("/v1/models")
        def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": "scripted", "object": "model"}]}

        @app.post("/v1/chat/completions")
        def completions(body: dict[str, Any] = Body(...)) -> Any:
            answer = self.answer(body)
            if "error" in answer:
                return JSONResponse(answer, status_code=answer["error"]["status"])
            return answer

        return app

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The completion for one request body (also callable without HTTP)."""
        with self._lock:
            self.requests.append(body)
            number = len(self.requests)
        if self.on_request is not None:
            self.on_request(number, body)
        if number in self.failures:
            status, code, text = self.failures[number]
            return {
                "error": {
                    "message": text,
                    "type": "invalid_request_error",
                    "code": code,
                    "status": status,
                }
            }
        command = self.commands[number - 1] if number <= len(self.commands) else SUBMIT
        thought = f"Step {number}: I run the next command."
        message: dict[str, Any] = {"role": "assistant", "content": thought}
        if body.get("tools"):
            call = {"name": "bash", "arguments": json.dumps({"command": command})}
            message["tool_calls"] = [{"id": f"call_{number}", "type": "function", "function": call}]
            finish = "tool_calls"
        else:
            message["content"] = f"{thought}\n\n```mswea_bash_command\n{command}\n```"
            finish = "stop"
        prompt = count_tokens(json.dumps(body.get("messages", [])))
        completion = count_tokens(json.dumps(message))
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        with self._lock:
            self.usages.append(usage)
        return {
            "id": f"chatcmpl-scripted-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model", "scripted")),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }

    def start(self, timeout: float = 20.0) -> ScriptedModelServer:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the scripted model server did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
