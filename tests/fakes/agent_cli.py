"""Stand-in for the `claude` and `codex` CLIs (chosen by the name it is run as).

It records how it was called (argv, cwd, chosen environment variables) as one JSON line in
$FAKE_RECORD, then acts out $FAKE_MODE: ok, fail, max_turns, context, steps (codex prints
command events until killed) or hang (starts a child, ignores SIGTERM, sleeps).
"""

import json
import os
import signal
import subprocess
import sys
import time

SEEN = (
    "SWARM_HUB_URL",
    "SWARM_TOKEN",
    "ANTHROPIC_BASE_URL",
    "OPENAI_BASE_URL",
    "GIT_TERMINAL_PROMPT",
    "FAKE_MODE",
)


def emit(event: dict) -> None:
    print(json.dumps(event), flush=True)


def hang() -> None:
    child = subprocess.Popen(["sleep", "60"])
    with open(os.environ["FAKE_RECORD"] + ".child", "w") as handle:
        handle.write(str(child.pid))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only the SIGKILL that follows ends it
    print("working...", flush=True)
    time.sleep(60)


def claude(mode: str) -> int:
    usage = {
        "input_tokens": 120,
        "cache_creation_input_tokens": 30,
        "cache_read_input_tokens": 50,
        "output_tokens": 40,
    }
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "num_turns": 3,
        "result": "merged PR #1",
        "total_cost_usd": 0.0123,
        "usage": usage,
    }
    if mode == "max_turns":
        result.update(subtype="error_max_turns", is_error=True, num_turns=5, result="")
        emit(result)
        return 1
    if mode == "fail":
        print("Invalid API key · Please run /login", file=sys.stderr)
        return 3
    emit(result)
    return 0


def codex(mode: str) -> int:
    emit({"type": "thread.started", "thread_id": "th_1"})
    emit({"type": "turn.started"})
    if mode == "context":
        message = "Your input exceeds the context window of this model."
        emit({"type": "turn.failed", "error": {"message": message}})
        return 1
    count = 10_000 if mode == "steps" else 2
    for n in range(count):
        item = {
            "id": f"item_{n}",
            "type": "command_execution",
            "command": f"bash -lc 'sw tail -n {n}'",
            "aggregated_output": "",
            "exit_code": 0,
            "status": "completed",
        }
        emit({"type": "item.completed", "item": item})
        if mode == "steps":
            time.sleep(0.05)
    change = {
        "id": "item_f",
        "type": "file_change",
        "status": "completed",
        "changes": [{"path": "notes.txt", "kind": "add"}],
    }
    emit({"type": "item.completed", "item": change})
    emit(
        {
            "type": "item.completed",
            "item": {"id": "item_m", "type": "agent_message", "text": "merged PR #2"},
        }
    )
    emit(
        {
            "type": "turn.completed",
            "usage": {"input_tokens": 200, "cached_input_tokens": 80, "output_tokens": 60},
        }
    )
    return 0


def main() -> int:
    record = {
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "env": {k: os.environ[k] for k in SEEN if k in os.environ},
    }
    with open(os.environ["FAKE_RECORD"], "a") as handle:
        handle.write(json.dumps(record) + "\n")
    mode = os.environ.get("FAKE_MODE", "ok")
    if mode == "hang":
        hang()
    name = os.path.basename(sys.argv[0])
    return codex(mode) if name == "codex" else claude(mode)


if __name__ == "__main__":
    sys.exit(main())
