"""`swarm eval --hub`: the evaluator as a service (the compose `evaluator`): score main after
each merge (it polls main's ref on Gitea), at intervals and on stop, and record each checkpoint
with the hub."""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path
from types import FrameType

from swarm.evaluation.evaluate import Checkpoint
from swarm.evaluation.evaluator import Evaluator
from swarm.tasks.environment import PythonEnv
from swarm.tasks.model import Task
from swarm.tools.client import HubClient, HubError

log = logging.getLogger(__name__)


def follow(
    task: Task,
    repo: str,
    hub_url: str,
    operator_token: str,
    workdir: Path,
    every: float,
    *,
    sandbox: str | None = None,
    python_env: PythonEnv | None = None,
) -> None:
    """Score now, then whenever main moves and every `every` seconds until SIGTERM/SIGINT, then
    once more."""
    client = HubClient(hub_url, operator_token)
    stop = threading.Event()

    def record(checkpoint: Checkpoint) -> None:
        payload = checkpoint.to_hub()
        for attempt in range(30):  # the hub may be restarting with the stack
            try:
                client.call("POST", "/v1/checkpoints", json=payload)
                break
            except HubError as exc:
                if exc.status in (401, 403):
                    log.error("the hub refused the operator token: %s", exc)
                    return
                time.sleep(min(10, 1 + attempt))
        score = (
            f"{checkpoint.passed}/{checkpoint.total}"
            if checkpoint.status == "scored"
            else checkpoint.status
        )
        print(
            f"swarm eval: {checkpoint.commit[:12] or '-'} {score} "
            f"{checkpoint.reason or ''}".rstrip(),
            flush=True,
        )

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    evaluator = Evaluator(task, repo, record, workdir=workdir, interval=every, sandbox=sandbox,
                          python_env=python_env)  # fmt: skip
    print(
        f"swarm eval: scoring {task.name} on {repo.split('@')[-1]} after each merge and every "
        f"{every:g}s",
        flush=True,
    )
    evaluator.start()  # main as it is now, then each move of it (coalesced)
    stop.wait()
    evaluator.stop(final=True)
    client.close()
