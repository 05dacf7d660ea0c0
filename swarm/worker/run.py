"""A run: one command starts the hub, N workers and the evaluator on a task, shows progress,
stops cleanly, and leaves everything in a run directory for inspection."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from swarm.config import Settings
from swarm.errors import InvalidInput
from swarm.evaluation import Checkpoint, Evaluator
from swarm.hub.server import HubProcess
from swarm.provenance import provenance, reported_models
from swarm.sandbox import NONE_WARNING, default_sandbox, get_sandbox
from swarm.switches import ENV as WITHOUT_ENV
from swarm.switches import parse_without
from swarm.tasks.environment import task_environment
from swarm.tasks.model import Task
from swarm.tasks.published import publish_task
from swarm.tools.client import HubClient, HubError
from swarm.worker.logpipe import LogPipe
from swarm.workspace.repo import init_repo

log = logging.getLogger("swarm.run")

WORKERS_PER_PROCESS = 256
# A worker process that dies (killed, crashed) is started again this many times per process
# slot; its workers register anew and the hub frees the dead ones' claims (SWARM_DEAD_AFTER).
WORKER_RESTARTS = int(os.environ.get("SWARM_WORKER_RESTARTS", "3"))
HUB_RESTARTS = int(os.environ.get("SWARM_HUB_RESTARTS", "3"))
# The operator's calls retry briefly: the panel must keep answering Ctrl-C during an outage.
OPERATOR_RETRY_SECONDS = 5.0
FINISHED = "every worker finished"
DIED = "workers died"


def empty_summary() -> dict[str, Any]:
    """What the panel shows before the hub answered once."""
    return {
        "workers": 0,
        "entries": {},
        "claims": {"active": 0, "completed": 0, "failed": 0, "released": 0, "lapsed": 0},
        "sessions": {"total": 0, "running": 0},
        "tokens_in": 0,
        "tokens_out": 0,
        "cost": 0.0,
        "messages": {"channel": 0, "direct": 0},
        "checkpoint": None,
        "stop": False,
    }


# Failed sessions, with none succeeded anywhere, after which the run stops: the cause (a bad key,
# a missing CLI) fails every session alike, and a retry a few seconds later will not fix it.
FAILED_SESSIONS_LIMIT = 3
# Seconds workers get to finish their step and release their claims once the run ends.
STOP_GRACE = 10.0
# What worker processes must not inherit from `swarm run`'s environment.
HUB_SECRETS = ("SWARM_OPERATOR_TOKEN", "SWARM_JOIN_TOKEN", "SWARM_DATABASE_URL")


def broken_setup(summary: dict[str, Any]) -> str | None:
    """Why the run cannot work, from the hub's summary: sessions fail and none succeeded (a
    bad key, a missing CLI). A session a full disk failed does not count: it passes once space
    returns, and the run waits for it."""
    sessions = summary["sessions"]
    failed = sessions.get("failed", 0) - sessions.get("disk_full", 0)
    if sessions.get("succeeded") != 0 or failed < FAILED_SESSIONS_LIMIT:
        return None
    failing = summary.get("failing") or [{"worker": "?", "detail": "no detail"}]
    return (
        f"no session succeeded: {sessions['failed']} failed; "
        f"{failing[0]['worker']}: {failing[0]['detail'][:300]}"
    )


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
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port
    sandbox: str = field(default_factory=default_sandbox)
    resume: bool = False  # continue the run already in run_dir (same workers, code, context)
    spent_seconds: float = 0.0  # of the budget, by the run's earlier parts
    extra_worker_args: list[str] = field(default_factory=list)
    without: tuple[str, ...] = ()  # mechanisms the run is without (swarm.switches), sorted

    def process_count(self) -> int:
        wanted = self.processes or -(-self.workers // WORKERS_PER_PROCESS)
        return max(1, min(wanted, self.workers))


def default_run_dir(task: Task, root: Path = Path("runs")) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return root / f"{task.name}-{stamp}"


def write_run_file(
    plan: RunPlan, *, provenance: dict[str, Any] | None = None, **extra: Any
) -> None:
    values = {
        "task": str(plan.task.root),
        "task_name": plan.task.name,
        "workers": plan.workers,
        "processes": plan.process_count(),
        "harness": plan.harness,
        "model": plan.model or "",
        "model_mix": plan.model_mix or "",
        "budget_seconds": plan.budget_seconds,
        "max_cost": plan.max_cost or 0.0,
        "database_url": plan.database_url or "",
        "sandbox": plan.sandbox,
        "without": sorted(plan.without),
        **({"sandbox_warning": NONE_WARNING} if plan.sandbox == "none" else {}),
        **extra,
    }
    lines = [f"{k} = {_toml(v)}" for k, v in values.items()]
    if provenance:  # what the run was made with (swarm.provenance), a table at the end
        lines += ["", "[provenance]", *(f"{k} = {_toml(v)}" for k, v in provenance.items())]
    # The database URL may hold a password: the owner's eyes only, from the first byte.
    write_private(plan.run_dir / "run.toml", "\n".join(lines) + "\n")


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` readable by its owner only (never world-readable, even briefly)."""
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(temporary, 0o600)  # an earlier file of that name kept its own mode
    os.replace(temporary, path)


def _toml(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def resume_plan(run_dir: Path, **overrides: Any) -> RunPlan:
    """The plan of the run in `run_dir`, to continue it: the same task, workers (their saved
    identities), harness and models, and what is left of its budget. A run that crashed left no
    end time: the last write to its directory's logs stands for it."""
    from swarm.tasks.model import load_task

    run_file = run_dir / "run.toml"
    if not run_file.is_file():
        raise InvalidInput(
            f"{run_dir} holds no run (no run.toml); give the directory `swarm run` printed"
        )
    saved = read_run_file(run_dir)
    spent = saved.get("spent_seconds", 0.0)
    if "ended" not in saved:  # crashed: its last sign of life
        logs = [p for p in (run_dir / "hub.log", *run_dir.glob("workers-*.log")) if p.exists()]
        last = max((p.stat().st_mtime for p in logs), default=saved.get("started", time.time()))
        spent += max(0.0, last - saved.get("started", last))
    plan = RunPlan(
        task=load_task(Path(saved["task"])),
        run_dir=run_dir.resolve(),
        workers=int(saved["workers"]),
        processes=saved.get("processes"),
        harness=saved["harness"],
        model=saved.get("model") or None,
        model_mix=saved.get("model_mix") or None,
        budget_seconds=float(saved["budget_seconds"]),
        max_cost=saved.get("max_cost") or None,
        database_url=saved.get("database_url") or None,
        resume=True,
        spent_seconds=float(spent),
        without=parse_without(saved.get("without", ())),
        **({"sandbox": saved["sandbox"]} if saved.get("sandbox") else {}),
    )
    for key, value in overrides.items():
        setattr(plan, key, value)
    if plan.spent_seconds >= plan.budget_seconds:
        raise InvalidInput(
            f"the run in {run_dir} has spent its budget ({plan.budget_seconds:.0f}s); "
            "give it more with --budget (the whole budget, e.g. 2h)"
        )
    return plan


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
    sandbox: str = "none"
    failed: bool = False  # the run ended because it could not work (every session failed, …)
    restarts: int = 0  # worker processes started again after they were killed
    # The hub's disk as the run saw it: {"episodes", "full_seconds", "full", "last_error"}
    # when it filled up at least once (writes were refused), else empty.
    disk: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what went wrong on the way out

    @property
    def exit_code(self) -> int:
        """1 when the run could not finish (workers died past their restarts, every session
        failed, …); 0 when it ended as planned. `swarm run` exits with it."""
        return 1 if self.failed else 0


def _to_stderr(line: str) -> None:
    print(f"hub: {line}", file=sys.stderr, flush=True)


class Run:
    """Owns the processes of one run; `start`, then `poll` until `finished`, then `stop`.
    `on_hub_line` gets the hub's important log lines (errors, the disk filling up), which
    must reach a person even when the run directory's disk is full (default: stderr)."""

    def __init__(self, plan: RunPlan, on_hub_line: Callable[[str], None] | None = None) -> None:
        self.plan = plan
        self.on_hub_line = on_hub_line or _to_stderr
        self.disk_by_hub: dict[int, dict[str, Any]] = {}  # the hub's disk, once it was full
        self.worker_logs: list[LogPipe] = []
        self.hub: HubProcess | None = None
        self.operator: HubClient | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self.worker_args: list[list[str]] = []  # per process slot, to start it again
        self.restarts = 0
        self.slot_restarts: list[int] = []
        self.hub_restarts = 0
        self.hub_error = ""  # the last error of a hub call, shown until a call succeeds
        self.evaluator: Evaluator | None = None
        self.started = time.time()
        self.deadline = self.started + plan.budget_seconds - plan.spent_seconds
        self.stopped_because = ""
        self.failure: str | None = None
        self.cost_capped = False
        self.last_summary: dict[str, Any] | None = None
        self.evaluated: str | Path = plan.run_dir / "workspace.git"
        self.provenance: dict[str, Any] = {}

    def start(self) -> None:
        plan = self.plan
        plan.task.require_prepared()
        get_sandbox(plan.sandbox)  # a missing backend stops the run before anything starts
        # The task's environment, built now (with pip's progress on screen) or taken from the
        # cache: the evaluator scores with it and every worker process finds it cached.
        python_env = task_environment(plan.task)
        plan.run_dir.mkdir(parents=True, exist_ok=True)
        # The run's database, workspace, tokens and checkouts are for this user only.
        plan.run_dir.chmod(0o700)
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
        publish_task(plan.task, plan.run_dir, harness=plan.harness, team_size=plan.workers)
        # Workers join with a token of their own, good for the declared number of workers
        # only; the operator token never leaves this process and the hub.
        self.join_token = "swj_" + secrets.token_urlsafe(24)
        env = {
            "SWARM_REQUIRED_APPROVALS": str(plan.required_approvals),
            "SWARM_JOIN_TOKEN": self.join_token,
            "SWARM_MAX_WORKERS": str(plan.workers),
            "SWARM_SANDBOX": plan.sandbox,  # the merge check runs in it too
            WITHOUT_ENV: ",".join(plan.without),  # the hub enforces the switches
        }
        if plan.merge_check:
            env["SWARM_MERGE_CHECK"] = plan.merge_check
        self.hub = HubProcess(
            plan.run_dir,
            database_url=plan.database_url,
            host=plan.host,
            port=plan.port,
            env=env,
            forward=self.on_hub_line,
        ).start()
        write_private(plan.run_dir / "operator.token", self.hub.operator_token + "\n")
        self.operator = HubClient(
            self.hub.url, self.hub.operator_token, retry_for=OPERATOR_RETRY_SECONDS
        )
        if plan.resume:
            # The operator's resume lifts the stop the run ended with (and a cost cap's pause).
            for flag in ("stop", "no_new_sessions"):
                self.operator.call("POST", "/v1/operator/flags", json={"key": flag, "value": "0"})
        self.provenance = provenance(plan.task, plan.harness, plan.model, plan.model_mix)
        write_run_file(
            plan,
            provenance=self.provenance,
            hub_url=self.hub.url,
            started=self.started,
            spent_seconds=plan.spent_seconds,
        )
        self.evaluator = Evaluator(
            plan.task,
            evaluated,
            self.record_checkpoint,
            workdir=plan.run_dir / "eval",
            interval=plan.eval_every,
            sandbox=plan.sandbox,
            python_env=python_env,
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
                "--identities",
                str(plan.run_dir / "workers" / f"identities-{index + 1}.json"),
                "--think",
                str(plan.think),
                "--max-steps",
                str(plan.max_steps),
                "--required-approvals",
                str(plan.required_approvals),
                "--sandbox",
                plan.sandbox,
                *plan.extra_worker_args,
            ]
            for flag, value in (
                ("--model", plan.model),
                ("--model-mix", plan.model_mix),
                ("--api-base", plan.api_base),
            ):
                if value:
                    args += [flag, value]
            self.worker_args.append(args)
            self.slot_restarts.append(0)
            self.workers.append(self._spawn(index))

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        assert self.hub is not None
        # Through a pipe, so the log survives a full run directory (swarm.worker.logpipe).
        log = LogPipe(self.plan.run_dir / f"workers-{index + 1}.log")
        self.worker_logs.append(log)
        env = {
            **{k: v for k, v in os.environ.items() if k not in HUB_SECRETS},
            "SWARM_JOIN_TOKEN": self.join_token,
            WITHOUT_ENV: ",".join(self.plan.without),  # checked against the hub's
        }
        try:
            return subprocess.Popen(
                self.worker_args[index],
                env=env,
                stdout=log.child_fd,
                stderr=log.child_fd,
                start_new_session=True,
            )
        finally:
            log.started()  # the child has its own descriptor

    def record_checkpoint(self, checkpoint: Checkpoint) -> None:
        if self.operator is None:
            return
        # If the hub is already shutting down, the final score is still printed.
        with contextlib.suppress(HubError):
            self.operator.call(
                "POST",
                "/v1/checkpoints",
                json=checkpoint.to_hub(),
            )

    def summary(self) -> dict[str, Any]:
        """The hub's counters; while the hub does not answer, the last ones it gave (a status
        poll never ends the run: `hub_error` says why the numbers are old)."""
        if self.operator is None:
            return dict(self.last_summary or empty_summary())
        try:
            result: dict[str, Any] = self.operator.call("GET", "/v1/summary")["result"]
        except HubError as exc:
            self.hub_error = exc.message
            return {**(self.last_summary or empty_summary()), "hub_error": exc.message}
        self.hub_error = ""
        self.last_summary = result
        disk = result.get("disk") or {}
        if disk.get("episodes"):  # per hub process: a restarted hub counts from zero
            self.disk_by_hub[self.hub_restarts] = disk
        return result

    def disk_seen(self) -> dict[str, Any]:
        """The hub's disk over the run: how often and how long it was full, if ever."""
        seen = list(self.disk_by_hub.values())
        if not seen:
            return {}
        latest = self.disk_by_hub.get(self.hub_restarts, {})
        return {
            "episodes": sum(int(d.get("episodes", 0)) for d in seen),
            "full_seconds": round(sum(float(d.get("full_seconds", 0.0)) for d in seen), 1),
            "refused": sum(int(d.get("refused", 0)) for d in seen),
            "full": bool(latest.get("full")),
            "last_error": str(seen[-1].get("last_error", "")),
        }

    @property
    def dashboard_url(self) -> str | None:
        return f"{self.hub.url}/dashboard" if self.hub else None

    def workers_alive(self) -> int:
        return sum(1 for p in self.workers if p.poll() is None)

    def poll(self) -> str | None:
        """Why the run should end now, or None to go on (`failure` says if it could not work).
        Starts again the hub or a worker process that was killed, up to SWARM_HUB_RESTARTS /
        SWARM_WORKER_RESTARTS times."""
        self._revive_hub()
        stopping = time.time() >= self.deadline
        self._restart_killed(stopping)
        if not self.workers_alive():
            return self._why_workers_ended()
        if stopping:
            return "budget reached"
        summary = self.summary()
        if summary.get("stop"):
            return "stopped by `swarm stop`"
        broken = broken_setup(summary)
        if broken:
            self.failure = broken
            return broken
        if (
            self.plan.max_cost is not None
            and summary["cost"] >= self.plan.max_cost
            and not self.cost_capped
            and self.operator is not None
        ):
            with contextlib.suppress(HubError):  # asked again on the next poll
                self.operator.call(
                    "POST", "/v1/operator/flags", json={"key": "no_new_sessions", "value": "1"}
                )
                self.cost_capped = True
        return None

    def _restart_killed(self, stopping: bool) -> None:
        """A worker process killed by a signal (SIGKILL, a crash) is started again; one that
        exited with an error is not (its cause, e.g. a bad key, would fail it again)."""
        for index, proc in enumerate(self.workers):
            code = proc.poll()
            if code is None or code >= 0:
                continue
            if stopping or self.slot_restarts[index] >= WORKER_RESTARTS:
                continue
            self.slot_restarts[index] += 1
            self.restarts += 1
            log.warning(
                "worker process %d was killed (%s); starting it again (%d of %d)",
                index + 1, code, self.slot_restarts[index], WORKER_RESTARTS,
            )  # fmt: skip
            self.workers[index] = self._spawn(index)

    def _revive_hub(self) -> None:
        hub = self.hub
        if hub is None or hub.process is None or hub.process.poll() is None:
            return
        if self.hub_restarts >= HUB_RESTARTS:
            return
        self.hub_restarts += 1
        log.warning("the hub exited with %s; starting it again", hub.process.returncode)
        try:
            hub.start()  # same port and tokens: workers ride out the gap by retrying
        except RuntimeError as exc:
            self.hub_error = f"the hub could not be started again: {exc}"

    def _why_workers_ended(self) -> str:
        if (self.last_summary or {}).get("stop"):
            return "stopped by `swarm stop`"
        if self.cost_capped:
            return f"cost cap reached (${self.plan.max_cost:.2f})"
        killed = [(i, p.returncode) for i, p in enumerate(self.workers) if p.returncode < 0]
        if killed:
            codes = ", ".join(f"process {i + 1}: signal {-c}" for i, c in killed)
            self.failure = f"{DIED} ({codes}; restarted {self.restarts} time(s))"
            return self.failure
        if all(p.returncode for p in self.workers):
            lines = [line for log in self.worker_logs for line in log.tail if line.strip()]
            tail = lines[-1][:300] if lines else ""
            self.failure = f"every worker process failed: {tail or 'see workers-*.log'}"
            return self.failure
        return FINISHED

    def stop(self, reason: str, grace: float = STOP_GRACE) -> RunOutcome:
        """Stop the workers (they release their claims), score main once more, stop the hub.
        A hub that does not answer costs the stop nothing but its numbers; the hub process is
        stopped whatever else failed, so it never outlives the run."""
        self.stopped_because = reason
        notes: list[str] = []
        try:
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
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            final = self.evaluator.stop(final=True) if self.evaluator else None
            self._keep_a_copy_of_the_code()
            summary = self.summary()
            ended = time.time()
            assert self.hub is not None
            if self.provenance:
                self.provenance["models_reported"] = self._models_reported()
            try:
                write_run_file(
                    self.plan,
                    provenance=self.provenance,
                    hub_url=self.hub.url,
                    started=self.started,
                    ended=ended,
                    stopped_because=reason,
                    spent_seconds=self.plan.spent_seconds + ended - self.started,
                )
            except OSError as exc:  # a full disk: the outcome is still told
                notes.append(f"run.toml was not updated ({exc}); --resume counts from its logs")
        finally:
            if self.operator is not None:
                self.operator.close()
            if self.hub is not None:
                self.hub.stop()
            for log in self.worker_logs:
                log.close(timeout=1.0)
        return RunOutcome(
            self.plan.run_dir,
            self.hub.url,
            self.started,
            ended,
            summary,
            final,
            reason,
            self.plan.sandbox,
            failed=self.failure is not None,
            restarts=self.restarts,
            disk=self.disk_seen(),
            notes=notes,
        )

    def _models_reported(self) -> list[str]:
        """The models the sessions used, as the provider named them where the harness noted
        it (mini), else as configured."""
        from sqlalchemy import select
        from sqlalchemy.exc import SQLAlchemyError

        from swarm.db import Database
        from swarm.worker.schema import sessions

        url = self.plan.database_url or f"sqlite:///{self.plan.run_dir / 'hub.db'}"
        try:
            db = Database(url)
            try:
                with db.read() as conn:
                    rows = conn.execute(select(sessions.c.model, sessions.c.detail)).all()
            finally:
                db.dispose()
        except SQLAlchemyError:
            return []
        reported = reported_models(str(r.detail or "") for r in rows)
        return reported or sorted({str(r.model) for r in rows if r.model})

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
