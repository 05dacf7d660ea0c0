"""A run: one command starts the hub, N workers and the evaluator on a task, shows progress,
stops cleanly, and leaves everything in a run directory for inspection."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from swarm.config import Settings
from swarm.evaluation import Checkpoint, Evaluator
from swarm.hub.server import HubProcess
from swarm.tasks.model import Task
from swarm.tools.client import HubClient, HubError
from swarm.workspace.repo import init_repo

WORKERS_PER_PROCESS = 256


@dataclass
class RunPlan:
    task: Task
    run_dir: Path
    workers: int = 4
    harness: str = "sim"
    model: str | None = None
    model_mix: str | None = None
    api_base: str | None = None
    budget_seconds: float = 1800.0
    max_cost: float | None = None
    eval_every: float = 600.0
    processes: int | None = None
    think: float = 1.0
    max_steps: int = 100
    required_approvals: int = 0
    merge_check: str | None = None
    database_url: str | None = None
    extra_worker_args: list[str] = field(default_factory=list)

    def process_count(self) -> int:
        wanted = self.processes or -(-self.workers // WORKERS_PER_PROCESS)
        return max(1, min(wanted, self.workers))


def default_run_dir(task: Task, root: Path = Path("runs")) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return root / f"{task.name}-{stamp}"


def write_run_file(plan: RunPlan, **extra: Any) -> None:
    values = {
        "task": str(plan.task.root),
        "task_name": plan.task.name,
        "workers": plan.workers,
        "harness": plan.harness,
        "model": plan.model or "",
        "model_mix": plan.model_mix or "",
        "budget_seconds": plan.budget_seconds,
        "max_cost": plan.max_cost or 0.0,
        "database_url": plan.database_url or "",
        **extra,
    }
    lines = [f"{k} = {_toml(v)}" for k, v in values.items()]
    (plan.run_dir / "run.toml").write_text("\n".join(lines) + "\n")


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def read_run_file(run_dir: Path) -> dict[str, Any]:
    return tomllib.loads((run_dir / "run.toml").read_text())


@dataclass
class RunOutcome:
    run_dir: Path
    hub_url: str
    started: float
    ended: float
    summary: dict[str, Any]
    final: Checkpoint | None
    stopped_because: str


class Run:
    """Owns the processes of one run; `start`, then `poll` until `finished`, then `stop`."""

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.hub: HubProcess | None = None
        self.operator: HubClient | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self.evaluator: Evaluator | None = None
        self.started = time.time()
        self.deadline = self.started + plan.budget_seconds
        self.stopped_because = ""
        self.evaluated: str | Path = plan.run_dir / "workspace.git"

    def start(self) -> None:
        plan = self.plan
        plan.task.require_prepared()
        plan.run_dir.mkdir(parents=True, exist_ok=True)
        # The hub inherits this environment: SWARM_WORKSPACE=gitea puts the code on Gitea, whose
        # repository is seeded (if main is new) and protected here, and read by the evaluator.
        evaluated: str | Path = plan.run_dir / "workspace.git"
        settings = Settings(required_approvals=plan.required_approvals)
        if settings.workspace == "gitea":
            from swarm.workspace import gitea

            remote = gitea.from_settings(settings)
            try:
                remote.prepare(plan.task.start_dir)
                evaluated = remote.reader_url()
            finally:
                remote.client.close()
        else:
            init_repo(plan.run_dir / "workspace.git", plan.task.start_dir)
        self.evaluated = evaluated
        env = {"SWARM_REQUIRED_APPROVALS": str(plan.required_approvals)}
        if plan.merge_check:
            env["SWARM_MERGE_CHECK"] = plan.merge_check
        self.hub = HubProcess(plan.run_dir, database_url=plan.database_url, env=env).start()
        (plan.run_dir / "operator.token").write_text(self.hub.operator_token + "\n")
        os.chmod(plan.run_dir / "operator.token", 0o600)
        self.operator = HubClient(self.hub.url, self.hub.operator_token)
        write_run_file(plan, hub_url=self.hub.url, started=self.started)
        self.evaluator = Evaluator(
            plan.task,
            evaluated,
            self.record_checkpoint,
            workdir=plan.run_dir / "eval",
            interval=plan.eval_every,
        )
        self.evaluator.start()
        self._start_workers()

    def _start_workers(self) -> None:
        plan = self.plan
        assert self.hub is not None
        processes = plan.process_count()
        base, extra = divmod(plan.workers, processes)
        for index in range(processes):
            count = base + (1 if index < extra else 0)
            args = [
                sys.executable,
                "-m",
                "swarm",
                "worker",
                "--hub",
                self.hub.url,
                "--count",
                str(count),
                "--task",
                str(plan.task.root),
                "--harness",
                plan.harness,
                "--team-size",
                str(plan.workers),
                "--deadline",
                str(self.deadline),
                "--workdir-root",
                str(plan.run_dir / "workers"),
                "--think",
                str(plan.think),
                "--max-steps",
                str(plan.max_steps),
                "--required-approvals",
                str(plan.required_approvals),
                *plan.extra_worker_args,
            ]
            for flag, value in (
                ("--model", plan.model),
                ("--model-mix", plan.model_mix),
                ("--api-base", plan.api_base),
            ):
                if value:
                    args += [flag, value]
            log = open(plan.run_dir / f"workers-{index + 1}.log", "ab")  # noqa: SIM115
            env = {**os.environ, "SWARM_JOIN_TOKEN": self.hub.operator_token}
            self.workers.append(
                subprocess.Popen(args, env=env, stdout=log, stderr=log, start_new_session=True)
            )

    def record_checkpoint(self, checkpoint: Checkpoint) -> None:
        if self.operator is None:
            return
        # If the hub is already shutting down, the final score is still printed.
        with contextlib.suppress(HubError):
            self.operator.call(
                "POST",
                "/v1/checkpoints",
                json={
                    "time": checkpoint.time,
                    "commit": checkpoint.commit,
                    "passed": checkpoint.passed,
                    "total": checkpoint.total,
                    "duration": checkpoint.duration,
                    "reason": checkpoint.reason,
                },
            )

    def summary(self) -> dict[str, Any]:
        assert self.operator is not None
        result: dict[str, Any] = self.operator.call("GET", "/v1/summary")["result"]
        return result

    def workers_alive(self) -> int:
        return sum(1 for p in self.workers if p.poll() is None)

    def poll(self) -> str | None:
        """Why the run should end now, or None to go on."""
        if not self.workers_alive():
            return "every worker finished"
        if time.time() >= self.deadline:
            return "budget reached"
        if self.plan.max_cost is not None:
            summary = self.summary()
            if summary["cost"] >= self.plan.max_cost and self.operator is not None:
                self.operator.call(
                    "POST", "/v1/operator/flags", json={"key": "no_new_sessions", "value": "1"}
                )
        return None

    def stop(self, reason: str, grace: float = 60.0) -> RunOutcome:
        self.stopped_because = reason
        if self.operator is not None:
            with contextlib.suppress(HubError):
                self.operator.call("POST", "/v1/operator/stop")
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.workers:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        final = self.evaluator.stop(final=True) if self.evaluator else None
        self._keep_a_copy_of_the_code()
        summary = self.summary() if self.operator else {}
        ended = time.time()
        assert self.hub is not None
        write_run_file(
            self.plan,
            hub_url=self.hub.url,
            started=self.started,
            ended=ended,
            stopped_because=reason,
        )
        if self.operator is not None:
            self.operator.close()
        self.hub.stop()
        return RunOutcome(
            self.plan.run_dir, self.hub.url, self.started, ended, summary, final, reason
        )

    def _keep_a_copy_of_the_code(self) -> None:
        """A run on a server (Gitea) leaves a bare copy of its main in the run directory too, so
        `swarm report` and `swarm export` work the same whichever workspace the run used."""
        if isinstance(self.evaluated, Path):
            return
        target = self.plan.run_dir / "workspace.git"
        command = (
            ["git", "-C", str(target), "fetch", "-q", self.evaluated, "+main:main"]
            if (target / "HEAD").exists()
            else [
                "git",
                "clone",
                "-q",
                "--bare",
                "--single-branch",
                "--branch",
                "main",
                self.evaluated,
                str(target),
            ]
        )
        subprocess.run(command, capture_output=True, check=False, timeout=300)


def outcome_dict(outcome: RunOutcome) -> dict[str, Any]:
    data = asdict(outcome)
    data["run_dir"] = str(outcome.run_dir)
    return data
