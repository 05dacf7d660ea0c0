"""The `mini` harness end to end: mini-swe-agent and litellm against a scripted model on
loopback, with a real hub, real git and the real `sw` on PATH. No LLM, no network."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from swarm.bootstrap import build_runtime
from swarm.config import Settings
from swarm.errors import InvalidInput
from swarm.harness import SessionContext, SessionLimits, SessionResult, get_harness
from swarm.harness.scripted_server import SUBMIT, ScriptedModelServer
from swarm.hub.server import BackgroundHub
from swarm.sandbox import BoxSpec, default_sandbox, get_sandbox
from swarm.tools import format as fmt
from swarm.tools.client import HubClient

# litellm would otherwise try to download its price list at import: tests stay off the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

PRICE_IN, PRICE_OUT = 2e-6, 8e-6  # dollars per token, configured on the harness
DM_TEXT = "w2 here: I take the parser, leave parser.py to me"


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[BackgroundHub]:
    runtime = build_runtime(Settings(run_dir=tmp_path / "run"))
    with BackgroundHub(runtime) as server:
        yield server
    runtime.close()


def register(hub: BackgroundHub) -> HubClient:
    with HubClient(hub.url, hub.runtime.operator_token) as operator:
        token = operator.register(model="openai/scripted")["token"]
    return HubClient(hub.url, token)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout


def checkout(hub: BackgroundHub, client: HubClient, name: str, path: Path) -> dict[str, str]:
    """Clones the workspace as the worker; answers the environment its commands run with."""
    auth = f"http.extraHeader=Authorization: Bearer {client.token}"
    git(path.parent, "clone", "-q", "-c", auth, f"{hub.url}/git/workspace.git", str(path))
    sw_dir = str(Path(sys.executable).parent)  # the venv's bin holds `sw`
    return {
        "SWARM_HUB_URL": hub.url,
        "SWARM_TOKEN": client.token or "",
        "PATH": f"{sw_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": f"{name}@swarm.invalid",
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": f"{name}@swarm.invalid",
    }


def pending_direct(client: HubClient) -> str:
    """What the runtime does: take the worker's new DMs from the hub, as text."""
    block = client.call("GET", "/v1/whoami").get("delivery") or {}
    return fmt.delivery({"messages": block.get("messages")})


def channel_digest(client: HubClient) -> str:
    posts = client.inbox()["result"]["channel"]
    return "\n".join(["--- tasks channel ---", *(fmt.message(m) for m in posts)]) if posts else ""


def tool_outputs(request: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in request["messages"] if m["role"] == "tool"]


SCRIPT = [
    'sw claim notes.txt -m "write the team notes"',
    "printf 'hello from w1\\n' > notes.txt",  # not an `sw` call: the DM must come from the hook
    "git checkout -q -b w1/notes && git add notes.txt && git commit -qm 'add notes'",
    "git push -q origin HEAD 2>&1",
    'sw pr open --title "Add notes" --body "adds notes.txt; checked with cat"',
    "sw pr merge 1",
    'sw summary 1 "added notes.txt, merged as PR #1"',
    SUBMIT,
]


def test_mini_session_claims_merges_and_hears_dms(hub: BackgroundHub, tmp_path: Path) -> None:
    me, peer = register(hub), register(hub)
    assert me.call("GET", "/v1/whoami")["result"]["name"] == "w1"
    env = checkout(hub, me, "w1", tmp_path / "w1")
    with HubClient(hub.url, hub.runtime.operator_token) as operator:
        operator.call("POST", "/v1/operator/channel", json={"body": "focus on the notes first"})

    def on_request(number: int, _body: dict[str, Any]) -> None:
        if number == 2:  # mid-session: the peer sends a DM while the model thinks
            peer.call("POST", "/v1/dm", json={"to": "w1", "body": DM_TEXT})

    steps: list[str] = []
    with ScriptedModelServer(SCRIPT, on_request=on_request) as model:
        harness = get_harness(
            "mini",
            api_key="sk-scripted",  # the server ignores it; litellm's OpenAI client wants one
            input_cost_per_token=PRICE_IN,
            output_cost_per_token=PRICE_OUT,
            log_dir=tmp_path / "logs",
        )
        ctx = SessionContext(
            worker="w1",
            number=1,
            workdir=tmp_path / "w1",
            prompt="You are w1. {{ not a template }} Claim, change, merge, summarise.",
            env=env,
            limits=SessionLimits(max_steps=20, max_seconds=120),
            model="openai/scripted",
            api_base=model.url,
            pending_direct=lambda: pending_direct(me),
            channel_digest=lambda: channel_digest(me),
            on_step=steps.append,
        )
        # In the sandbox a run gives its sessions by default (bwrap on Linux).
        ctx.box = get_sandbox(default_sandbox()).open(
            BoxSpec(name="w1", checkout=tmp_path / "w1", env=env)
        )
        try:
            result = harness.run_session(ctx)
        finally:
            ctx.box.close()

    assert result.ended == "submitted", result.detail
    # The model's name as the provider answered it, for the run's provenance.
    assert result.detail.splitlines()[-1] == "models reported by the provider: scripted"
    assert result.steps == len(SCRIPT) == len(model.requests)
    assert steps[0].startswith("sw claim notes.txt") and steps[-1] == SUBMIT

    first = model.requests[0]["messages"]
    assert first[1] == {"role": "user", "content": ctx.prompt}  # shown as-is, not re-rendered
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in first[0]["content"]
    assert "focus on the notes first" in first[2]["content"]  # the channel digest, before query 1

    # The DM arrived while the model answered request 2, so it ends the output of command 2.
    outputs = tool_outputs(model.requests[2])
    assert "recorded #1 CLAIM w1" in outputs[0] and DM_TEXT not in outputs[0]
    assert DM_TEXT in outputs[1] and "dm from w2" in outputs[1]
    assert all(DM_TEXT not in out for out in tool_outputs(model.requests[-1])[2:])

    final = tool_outputs(model.requests[-1])
    assert "opened #1" in final[4] and "merged #1" in final[5], final
    git(tmp_path / "w1", "fetch", "-q", "origin")
    assert git(tmp_path / "w1", "show", "origin/main:notes.txt") == "hello from w1\n"
    pr = me.call("GET", "/v1/prs/1")["result"]["pr"]
    assert pr["state"] == "merged" and pr["author"] == "w1"
    claims = me.call("GET", "/v1/claims", params={"all": "true"})["result"]["claims"]
    assert [c["state"] for c in claims if c["id"] == 1] == ["completed"]  # by the summary

    tokens_in = sum(u["prompt_tokens"] for u in model.usages)
    tokens_out = sum(u["completion_tokens"] for u in model.usages)
    assert (result.tokens_in, result.tokens_out) == (tokens_in, tokens_out) != (0, 0)
    assert result.cost == pytest.approx(tokens_in * PRICE_IN + tokens_out * PRICE_OUT)
    assert (tmp_path / "logs" / "w1-session1.mini.traj.json").exists()
    me.close()
    peer.close()


def session(tmp_path: Path, url: str, **changes: Any) -> SessionContext:
    values: dict[str, Any] = {
        "worker": "w1",
        "number": 1,
        "workdir": tmp_path,
        "prompt": "work",
        "env": {},
        "limits": SessionLimits(max_steps=10, max_seconds=60),
        "model": "openai/scripted",
        "api_base": url,
    }
    values.update(changes)
    return SessionContext(**values)


def run(tmp_path: Path, commands: list[str], **changes: Any) -> tuple[SessionResult, Any]:
    with ScriptedModelServer(commands) as model:
        # No api_key: a local server (api_base) gets a placeholder key.
        harness = get_harness("mini", input_cost_per_token=1e-3)
        return harness.run_session(session(tmp_path, model.url, **changes)), model


def test_limits_map_onto_session_endings(tmp_path: Path) -> None:
    result, _ = run(tmp_path, ["true"] * 5, limits=SessionLimits(max_steps=2))
    assert (result.ended, result.steps) == ("step_limit", 2)
    # Each answer costs well over a cent at 1e-3 per prompt token: the cost limit ends it.
    result, _ = run(tmp_path, ["true"] * 5, limits=SessionLimits(max_cost=0.01))
    assert result.ended == "cost_limit" and result.cost >= 0.01
    result, _ = run(tmp_path, ["sleep 5", "true"], limits=SessionLimits(max_seconds=1))
    assert result.ended == "time_limit" and result.steps == 1


def test_stop_flag_ends_the_session_between_steps(tmp_path: Path) -> None:
    stop = threading.Event()
    result, model = run(tmp_path, ["true"] * 5, stop=stop, on_step=lambda _a: stop.set())
    assert (result.ended, result.steps, len(model.requests)) == ("stopped", 1, 1)


def test_model_errors_map_onto_endings(tmp_path: Path) -> None:
    # OpenAI's wording, which litellm recognises as a context window error.
    message = "This model's maximum context length is 8192 tokens. Please reduce the length."
    too_long = (400, "context_length_exceeded", message)
    bad_key = (401, "invalid_api_key", "Incorrect API key provided")
    for failure, ended in ((too_long, "context_limit"), (bad_key, "error")):
        with ScriptedModelServer(["true"], failures={2: failure}) as model:
            result = get_harness("mini").run_session(session(tmp_path, model.url))
        assert (result.ended, result.steps) == (ended, 2), result.detail
        assert failure[2] in result.detail


def test_a_missing_model_says_what_to_set(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"--model.*openai/gpt-4\.1-mini.*--api-base"):
        get_harness("mini").run_session(session(tmp_path, "", model=None))


def test_cost_from_litellm_registry_when_no_price_is_configured(tmp_path: Path) -> None:
    import litellm

    # The other way to price a model litellm does not know: register it, process-wide.
    name = "openai/scripted-registered"
    litellm.register_model(
        {
            name: {
                "input_cost_per_token": 1e-6,
                "output_cost_per_token": 1e-6,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        }
    )
    with ScriptedModelServer(["true"]) as model:
        harness = get_harness("mini", api_key="sk-scripted")
        result = harness.run_session(session(tmp_path, model.url, model=name))
    total = sum(u["total_tokens"] for u in model.usages)
    assert result.ended == "submitted" and result.cost == pytest.approx(total * 1e-6)


def test_scripted_server_answers_text_based_clients_with_a_fenced_command() -> None:
    server = ScriptedModelServer(["ls -la"])
    answer = server.answer({"model": "scripted", "messages": [{"role": "user", "content": "hi"}]})
    message = answer["choices"][0]["message"]
    assert "```mswea_bash_command\nls -la\n```" in message["content"]
    assert "tool_calls" not in message and answer["usage"]["total_tokens"] > 0
    assert SUBMIT in server.answer({"messages": []})["choices"][0]["message"]["content"]
