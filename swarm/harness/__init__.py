"""Single-agent harnesses, selected by name and imported lazily.

A harness runs one *session*: an agent with a fresh context works in the worker's checkout from
the rendered prompt until it submits, hits a limit, or fails. The worker runtime runs sessions
back to back; the cooperation loop itself lives in the prompt.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from swarm.errors import InvalidInput
from swarm.sandbox import Box, BoxSpec, UnconfinedBox

SessionEnding = Literal[
    "submitted", "step_limit", "cost_limit", "time_limit", "context_limit", "error", "stopped"
]


@dataclass(frozen=True)
class SessionLimits:
    max_steps: int = 100
    max_cost: float = 0.0  # dollars; 0 = no limit
    max_seconds: float = 1800.0


@dataclass
class SessionContext:
    """Everything a harness needs for one session."""

    worker: str  # the worker's name, e.g. "w3"
    number: int  # 1, 2, ... within this worker
    workdir: Path  # the worker's own checkout
    prompt: str  # the rendered worker prompt (goal, loop, tools)
    env: dict[str, str]  # the commands' whole environment (swarm.sandbox.env.agent_env)
    limits: SessionLimits
    model: str | None = None
    api_base: str | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    # High-priority DMs, as text, to append to a command's output (empty when none).
    pending_direct: Callable[[], str] = lambda: ""
    # The low-priority channel digest, as text, to show before a model query (empty when none).
    channel_digest: Callable[[], str] = lambda: ""
    # Called after each step with a one-line description (status reporting).
    on_step: Callable[[str], None] = lambda _action: None
    # Where the session's commands run (swarm.sandbox); None: unconfined, with `env` only.
    box: Box | None = None
    # The mechanisms the run is without (swarm.switches), as the hub said: the hub refuses
    # their calls, and a scripted harness must not make them.
    without: tuple[str, ...] = ()

    def sandbox(self) -> Box:
        """The box every command of this session runs in."""
        if self.box is None:
            self.box = UnconfinedBox(BoxSpec(name=self.worker, checkout=self.workdir, env=self.env))
        return self.box


@dataclass(frozen=True)
class SessionResult:
    ended: SessionEnding
    steps: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    detail: str = ""


class Harness(Protocol):
    name: str

    def run_session(self, ctx: SessionContext) -> SessionResult: ...


HARNESSES: dict[str, str] = {
    "sim": "swarm.harness.sim:SimHarness",
    "mini": "swarm.harness.mini:MiniHarness",
    "claude-code": "swarm.harness.cli_agents:ClaudeCodeHarness",
    "codex": "swarm.harness.cli_agents:CodexHarness",
}


def get_harness(name: str, **options: object) -> Harness:
    """Build the harness registered under `name` (its module is imported only now)."""
    try:
        target = HARNESSES[name]
    except KeyError:
        raise InvalidInput(
            f"unknown harness {name!r}; choose one of {', '.join(sorted(HARNESSES))}"
        ) from None
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    factory = getattr(module, attr)
    harness: Harness = factory(**options)
    return harness
