"""The `mini` harness: mini-swe-agent 2.x (tool-calling `LitellmModel`) with swarm's hooks.

DMs are appended to each command's output, the channel digest is shown before each model
query, limits come from the session budget, and tokens and cost are summed per response.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from swarm.errors import InvalidInput
from swarm.harness import SessionContext, SessionEnding, SessionResult
from swarm.provenance import REPORTED
from swarm.sandbox import run as run_in

# mini-swe-agent prints a banner at import unless told not to; workers share one terminal.
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")

try:
    import litellm
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import get_config_from_spec
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.exceptions import FormatError, InterruptAgentFlow
    from minisweagent.models.litellm_model import LitellmModel
except ImportError as exc:  # the optional extra is not installed
    raise InvalidInput(
        f"the mini harness needs mini-swe-agent and litellm ({exc}): pip install 'swarm[mini]'"
    ) from exc

# litellm otherwise prints a "Give Feedback / Get Help" banner with every failed call.
litellm.suppress_debug_info = True

MISSING_MODEL = (
    "the mini harness needs a model: pass --model with any litellm model string, e.g. "
    "--model openai/gpt-4.1-mini with OPENAI_API_KEY set (or anthropic/claude-sonnet-4-5 with "
    "ANTHROPIC_API_KEY); for a local OpenAI-compatible server (vLLM, llama.cpp, Ollama) add "
    "--api-base, e.g. --model openai/<served-name> --api-base http://127.0.0.1:8000/v1"
)

SUBMIT_COMMAND = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

# Appended to mini-swe-agent's own system template: how this harness runs and ends a session.
SESSION_RULES = f"""
You act by calling the bash tool. Each call runs one command in a new subshell in your checkout
(the current directory); `cd` and exported variables do not persist between calls.
When the instructions below tell you to stop, end this session by running exactly
`{SUBMIT_COMMAND}` on its own, without any other command.
"""

# Commands in the session get these on top of the worker's environment: never block on a prompt.
QUIET_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true"}

EXIT_STATUS: dict[str, SessionEnding] = {
    "Submitted": "submitted",
    "TimeExceeded": "time_limit",
    "RepeatedFormatError": "error",
    "Stopped": "stopped",
}


def _exit(status: str) -> dict[str, Any]:
    return {"role": "exit", "content": status, "extra": {"exit_status": status, "submission": ""}}


def describe(message: dict[str, Any]) -> str:
    """One line for status displays: the first line of the step's first command."""
    actions = message.get("extra", {}).get("actions") or []
    if not actions:
        return "(no command)"
    lines = str(actions[0].get("command", "")).strip().splitlines() or [""]
    line = lines[0] + (" …" if len(lines) > 1 else "")
    line = line if len(line) <= 160 else line[:159] + "…"
    return line + (f" (+{len(actions) - 1} more)" if len(actions) > 1 else "")


def usage_of(response: Any) -> tuple[int, int]:
    """(prompt, completion) tokens from a serialized response; (0, 0) when it has none."""
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


class SwarmModel(LitellmModel):
    """Counts tokens per response; prices them itself when a per-token price is configured."""

    def __init__(
        self, *, input_cost_per_token: float, output_cost_per_token: float, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.price = (input_cost_per_token, output_cost_per_token)
        self.tokens_in = 0
        self.tokens_out = 0
        self.reported: set[str] = set()  # the model names the provider answered with

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        try:
            message: dict[str, Any] = super().query(messages, **kwargs)
        except FormatError as error:  # a malformed answer was still billed
            self._account(error.messages[0]["extra"])
            raise
        self._account(message["extra"])
        return message

    def _account(self, extra: dict[str, Any]) -> None:
        response = extra.get("response")
        prompt, completion = usage_of(response)
        if isinstance(response, dict) and response.get("model"):
            self.reported.add(str(response["model"]))
        self.tokens_in += prompt
        self.tokens_out += completion
        if any(self.price):
            # Overrides litellm's price, so the agent's cost limit sees the configured one.
            extra["cost"] = prompt * self.price[0] + completion * self.price[1]


class SwarmEnvironment(LocalEnvironment):
    """Runs each command in the session's sandbox (its checkout, its environment and nothing
    else) and appends pending direct messages to its output. The model is called from this
    process, outside the sandbox: the sandbox holds no provider key."""

    def __init__(self, ctx: SessionContext, deadline: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ctx = ctx
        self.deadline = deadline

    def execute(
        self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None
    ) -> dict[str, Any]:
        # A command may not outlive the session's wall-time budget.
        remaining = int(self.deadline - time.monotonic()) + 1
        timeout = max(1, min(timeout or self.config.timeout, remaining))
        output = self._run(str(action.get("command", "")), timeout)
        self._check_finished(output)
        # Appended, not prepended: a long output keeps its tail, so the DM survives truncation.
        direct = self.ctx.pending_direct()
        if direct:
            text = str(output.get("output") or "")
            output["output"] = text + ("\n" if text and not text.endswith("\n") else "") + direct
        return output

    def _run(self, command: str, timeout: int) -> dict[str, Any]:
        """mini-swe-agent's LocalEnvironment.execute, through the sandbox (same answer shape)."""
        try:
            done = run_in(
                self.ctx.sandbox(), ["bash", "-c", command], timeout=timeout, merge_stderr=True
            )
        except subprocess.TimeoutExpired as exc:
            output = exc.output or ""
            return {
                "output": output if isinstance(output, str) else output.decode(errors="replace"),
                "returncode": -1,
                "exception_info": f"An error occurred while executing the command: {exc}",
                "extra": {"exception_type": type(exc).__name__, "exception": str(exc)},
            }
        except OSError as exc:
            return {
                "output": "",
                "returncode": -1,
                "exception_info": f"the sandbox could not start the command: {exc}",
                "extra": {"exception_type": type(exc).__name__, "exception": str(exc)},
            }
        return {"output": done.stdout, "returncode": done.returncode, "exception_info": ""}

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        # mini-swe-agent offers os.environ to its templates; the worker's environment stays out.
        return {**self.config.model_dump(), **kwargs}


class SwarmAgent(DefaultAgent):
    """mini-swe-agent's loop with the stop flag, the channel digest and step reports."""

    model: SwarmModel

    def __init__(
        self, model: SwarmModel, env: SwarmEnvironment, ctx: SessionContext, **kwargs: Any
    ) -> None:
        super().__init__(model, env, **kwargs)
        self.ctx = ctx

    def query(self) -> dict[str, Any]:
        if self.ctx.stop.is_set():
            raise InterruptAgentFlow(_exit("Stopped"))
        digest = self.ctx.channel_digest()
        if digest:
            self.add_messages(self.model.format_message(role="user", content=digest))
        message: dict[str, Any] = super().query()
        return message

    def execute_actions(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            result: list[dict[str, Any]] = super().execute_actions(message)
            return result
        finally:  # also after the submit command, which ends the step by raising
            self.ctx.on_step(describe(message))


class MiniHarness:
    """Runs one session of mini-swe-agent against any litellm model."""

    name = "mini"

    def __init__(
        self,
        *,
        command_timeout: int = 300,
        input_cost_per_token: float = 0.0,
        output_cost_per_token: float = 0.0,
        api_key: str | None = None,
        model_kwargs: dict[str, Any] | None = None,
        log_dir: Path | str | None = None,
    ) -> None:
        self.command_timeout = command_timeout
        self.input_cost_per_token = input_cost_per_token
        self.output_cost_per_token = output_cost_per_token
        self.api_key = api_key
        self.model_kwargs = dict(model_kwargs or {})
        self.log_dir = Path(log_dir) if log_dir else None
        self.config = get_config_from_spec("mini")  # mini-swe-agent's own tool-calling config

    def build(self, ctx: SessionContext) -> SwarmAgent:
        """The agent for one session (separate from running it, for inspection)."""
        if not ctx.model:
            raise InvalidInput(MISSING_MODEL)
        model_kwargs: dict[str, Any] = {**self.config["model"].get("model_kwargs", {})}
        if ctx.api_base:
            model_kwargs["api_base"] = ctx.api_base
        if self.api_key:
            model_kwargs["api_key"] = self.api_key
        elif (
            ctx.api_base
            and ctx.model.startswith("openai/")
            and not os.environ.get("OPENAI_API_KEY")
        ):
            # litellm's OpenAI client refuses to start without a key; local servers ignore it.
            model_kwargs["api_key"] = "none"
        model_kwargs.update(self.model_kwargs)
        model = SwarmModel(
            model_name=ctx.model,
            model_kwargs=model_kwargs,
            observation_template=self.config["model"]["observation_template"],
            format_error_template=self.config["model"]["format_error_template"],
            # Local models have no litellm price; a missing price must not end the session.
            cost_tracking="ignore_errors",
            input_cost_per_token=self.input_cost_per_token,
            output_cost_per_token=self.output_cost_per_token,
        )
        limits = ctx.limits
        env = SwarmEnvironment(
            ctx,
            time.monotonic() + limits.max_seconds if limits.max_seconds > 0 else float("inf"),
            cwd=str(ctx.workdir),
            env={**self.config["environment"]["env"], **QUIET_ENV},
            timeout=self.command_timeout,
        )
        trajectory = None
        if self.log_dir:
            trajectory = self.log_dir / f"{ctx.worker}-session{ctx.number}.mini.traj.json"
        return SwarmAgent(
            model,
            env,
            ctx,
            system_template=self.config["agent"]["system_template"] + SESSION_RULES,
            instance_template="{{ task }}",  # the prompt arrives rendered: shown as-is
            step_limit=limits.max_steps,
            cost_limit=limits.max_cost,
            wall_time_limit_seconds=math.ceil(max(limits.max_seconds, 0)),
            output_path=trajectory,
        )

    def run_session(self, ctx: SessionContext) -> SessionResult:
        agent = self.build(ctx)
        detail = ""
        try:
            extra = agent.run(task=ctx.prompt)
            status = str(extra.get("exit_status", ""))
            ended = self._ending(status, agent, ctx)
            detail = str(extra.get("submission") or "").strip()[-2000:] or status
        except litellm.exceptions.ContextWindowExceededError as error:
            ended, detail = "context_limit", str(error)[:2000]
        except Exception as error:  # the session fails, the worker carries on with the next
            ended, detail = "error", f"{type(error).__name__}: {error}"[:2000]
        model = agent.model
        if agent.cost == 0 and model.tokens_in and ctx.limits.max_cost > 0:
            detail += (
                f"\n(cost unknown for {ctx.model}: the cost limit cannot apply; set the "
                "harness options input_cost_per_token/output_cost_per_token)"
            )
        if model.reported:  # the run's provenance reads it (swarm.provenance)
            detail += f"\n{REPORTED}{', '.join(sorted(model.reported))}"
        return SessionResult(
            ended=ended,
            steps=agent.n_calls,
            tokens_in=model.tokens_in,
            tokens_out=model.tokens_out,
            cost=agent.cost,
            detail=detail,
        )

    @staticmethod
    def _ending(status: str, agent: SwarmAgent, ctx: SessionContext) -> SessionEnding:
        if status == "LimitsExceeded":
            over_cost = 0 < ctx.limits.max_cost <= agent.cost
            return "cost_limit" if over_cost else "step_limit"
        return EXIT_STATUS.get(status, "error")
