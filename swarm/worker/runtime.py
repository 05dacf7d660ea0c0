"""The worker runtime: register, clone, then run harness sessions back to back until the budget
ends. The cooperation loop lives in the prompt; this only provides the harness, tools and env."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from swarm.errors import InvalidInput
from swarm.harness import Harness, SessionContext, SessionLimits, SessionResult, get_harness
from swarm.tools import format as fmt
from swarm.tools.client import HubClient, HubError
from swarm.worker.models import pick_model
from swarm.worker.prompt import render_worker_prompt

log = logging.getLogger("swarm.worker")

NO_WORK_LEFT = "no work left"

# Clones through the hub at once, per worker process: 256 workers starting together would
# otherwise run 256 `git http-backend`s on the hub at the same moment (and time out).
CLONE_SLOTS = threading.BoundedSemaphore(int(os.environ.get("SWARM_CLONE_CONCURRENCY", "4")))
CLONE_ATTEMPTS = 4
# Seconds a worker waits for the hub's answer. A busy hub (1,024 workers on 2 cores) answers
# in tens of seconds; a client that gives up after 60 s and retries only adds to the queue.
HUB_TIMEOUT = float(os.environ.get("SWARM_HUB_TIMEOUT", "300"))
_SEED_LOCK = threading.Lock()
_SEEDS: dict[str, tuple[threading.Lock, Path]] = {}


@dataclass
class WorkerOptions:
    hub_url: str
    join_token: str
    workdir_root: Path
    goal: str
    team_size: int = 1
    harness: str = "sim"
    harness_options: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    model_mix: str | None = None  # chosen by worker id once registered (see worker.models)
    api_base: str | None = None
    deadline: float = float("inf")  # unix time when the run's budget ends
    limits: SessionLimits = field(default_factory=SessionLimits)
    oracle: str | None = None
    required_approvals: int = 0
    max_sessions: int | None = None


@dataclass
class WorkerTotals:
    sessions: int = 0
    steps: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0


def git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def carries_credentials(url: str) -> bool:
    """A clone URL with its own user:password (e.g. Gitea's): the hub's bearer must not ride
    along, or the server would see two credentials."""
    return urlsplit(url).password is not None


def sw_bin_dir() -> str:
    """The directory holding the `sw` command of this installation."""
    found = shutil.which("sw", path=str(Path(sys.executable).parent))
    return str(Path(found).parent) if found else str(Path(sys.executable).parent)


class WorkerRuntime:
    def __init__(
        self,
        options: WorkerOptions,
        *,
        stop: threading.Event | None = None,
        harness: Harness | None = None,
    ) -> None:
        self.options = options
        self.stop = stop or threading.Event()
        self.harness = harness
        self.totals = WorkerTotals()
        self.name = "?"
        self.client: HubClient | None = None
        self.state = "starting"
        self.status: dict[str, Any] = {}
        self.flags: dict[str, Any] = {}
        self.reported = 0.0  # time.monotonic() of the last heartbeat that reached the hub
        self._reporting = threading.RLock()

    # -- set-up ---------------------------------------------------------------------------
    def register(self) -> HubClient:
        with HubClient(
            self.options.hub_url, self.options.join_token, timeout=HUB_TIMEOUT
        ) as joiner:
            info = joiner.register(None if self.options.model_mix else self.options.model)
        self.name = info["name"]
        self.options.model = pick_model(self.options.model, self.options.model_mix, info["id"])
        self.client = HubClient(self.options.hub_url, info["token"], timeout=HUB_TIMEOUT)
        return self.client

    def prepare_checkout(
        self, client: HubClient, *, sparse: bool = False
    ) -> tuple[Path, dict[str, str]]:
        """This worker's clone of the workspace, its origin the hub. It is made from a bare seed
        that the first worker of the process clones through the hub (one HTTP clone per process
        instead of one per worker: 1,024 clones made start-up take minutes). `sparse`: check
        out top-level files only (the simulated harness adds the files of the unit it works
        on), so 1,024 checkouts of a large task do not write millions of files."""
        assert client.token
        workdir = self.options.workdir_root / self.name
        if workdir.exists():
            shutil.rmtree(workdir)
        workdir.parent.mkdir(parents=True, exist_ok=True)
        where = client.call("GET", "/v1/workspace")["result"]
        seed = self.seed(where["clone_url"], client.token)
        # The configuration rides on the clone (`-c`): 1,024 workers starting together spawn
        # three git processes each instead of nine.
        config = {
            "user.name": self.name,
            "user.email": f"{self.name}@swarm.invalid",
            "gc.auto": "0",  # no surprise repacks in 1,024 checkouts
        }
        if not carries_credentials(where["clone_url"]):
            config["http.extraHeader"] = f"Authorization: Bearer {client.token}"
        if sparse:
            config["core.sparseCheckout"] = "true"
        git(
            "clone",
            "-q",
            "--local",
            "--no-checkout",
            "--no-tags",
            *(arg for key, value in config.items() for arg in ("-c", f"{key}={value}")),
            str(seed),
            str(workdir),
            cwd=workdir.parent,
        )
        git("remote", "set-url", "origin", where["clone_url"], cwd=workdir)
        if sparse:
            (workdir / ".git" / "info").mkdir(exist_ok=True)
            (workdir / ".git" / "info" / "sparse-checkout").write_text("/*\n!/*/\n")
        git("checkout", "-q", "-B", "main", "origin/main", cwd=workdir)
        env = {
            **os.environ,
            "PATH": sw_bin_dir() + os.pathsep + os.environ.get("PATH", ""),
            "SWARM_HUB_URL": self.options.hub_url,
            "SWARM_TOKEN": client.token,
            "SWARM_WORKER": self.name,
            "GIT_TERMINAL_PROMPT": "0",
        }
        env.pop("SWARM_JOIN_TOKEN", None)
        env.pop("SWARM_OPERATOR_TOKEN", None)
        if self.options.oracle:
            env["SWARM_ORACLE"] = self.options.oracle
        return workdir, env

    def seed(self, url: str, token: str) -> Path:
        """The process's bare clone of main through the hub, made once (see prepare_checkout)."""
        # One seed per process and directory: clone URLs may differ per worker (credentials).
        key = str(self.options.workdir_root)
        with _SEED_LOCK:
            lock = _SEEDS.setdefault(
                key, (threading.Lock(), self.options.workdir_root / f".seed-{os.getpid()}.git")
            )
        guard, path = lock
        with guard:
            if not (path / "HEAD").is_file():
                self.clone(url, token, path, "--bare")
        return path

    def clone(self, url: str, token: str, workdir: Path, *flags: str) -> None:
        """Clone main only (peers' branches are fetched when wanted), a few at a time per
        process, retrying while a busy hub refuses or drops the connection."""
        auth = (
            []
            if carries_credentials(url)
            else ["-c", f"http.extraHeader=Authorization: Bearer {token}"]
        )
        for attempt in range(1, CLONE_ATTEMPTS + 1):
            with CLONE_SLOTS:
                try:
                    git(
                        "clone",
                        "-q",
                        *flags,
                        "--single-branch",
                        "--no-tags",
                        *auth,
                        url,
                        str(workdir),
                        cwd=workdir.parent,
                    )
                    return
                except RuntimeError:
                    if attempt == CLONE_ATTEMPTS or self.stop.is_set():
                        raise
                    shutil.rmtree(workdir, ignore_errors=True)
            log.warning("%s: clone failed (attempt %d); retrying", self.name, attempt)
            self.stop.wait(2.0 * attempt)

    # -- hooks handed to the harness ------------------------------------------------------
    def pending_direct(self) -> str:
        """What is new for this worker (DMs first), for a harness's per-step hook."""
        assert self.client
        try:
            return fmt.delivery(self.client.call("GET", "/v1/whoami")["delivery"])
        except HubError as exc:
            return f"(could not reach the hub for messages: {exc.message})"

    def channel_digest(self) -> str:
        assert self.client
        try:
            data = self.client.inbox()
        except HubError as exc:
            return f"(could not read the channel: {exc.message})"
        posts = data["result"]["channel"]
        lines = [fmt.message(m) for m in posts]
        block = fmt.delivery(data.get("delivery"))
        if not lines and not block:
            return ""
        head = "--- tasks channel (new posts) ---" if lines else ""
        return "\n".join(part for part in (head, *lines, block) if part)

    def on_step(self, action: str) -> None:
        self.status["last_action"] = action[:200]

    def heartbeat(self, client: HubClient | None = None, *, final: bool = False) -> bool:
        """Report state (also a liveness signal); read the run's flags from the answer.

        One report at a time per worker, and none after the last: the heartbeat thread's report
        (read as `in_session`) once reached the hub after the worker's `stopped`, overwrote it
        and failed on the closed client (EBADF); 6 of 1,024 workers then looked alive for
        ever."""
        with self._reporting:
            if self.state == "stopped" and not final:
                return False
            client = client or self.client
            if client is None:
                return False
            try:
                answer = client.call(
                    "POST", "/v1/status", json={"state": self.state, "status": self.status_doc()}
                )
                self.reported = time.monotonic()
                self.flags = answer["result"]
                return True
            except HubError as exc:
                log.warning("%s: heartbeat failed: %s", self.name, exc.message)
                return False

    def report_stopped(self, client: HubClient) -> None:
        """The last report (the hub releases this worker's claims on it); retried, on a
        client of its own, while the hub does not answer."""
        with self._reporting:
            self.state = "stopped"
        if self.heartbeat(client, final=True):
            return
        for attempt in range(3):
            time.sleep(1.0 + attempt)
            with HubClient(self.options.hub_url, client.token, timeout=HUB_TIMEOUT) as fresh:
                if self.heartbeat(fresh, final=True):
                    return

    def status_doc(self) -> dict[str, Any]:
        return {**self.status, **self.totals.__dict__}

    # -- the loop -------------------------------------------------------------------------
    def should_stop(self) -> str | None:
        if self.stop.is_set() or self.flags.get("stop"):
            return "stopped"
        if time.time() >= self.options.deadline:
            return "budget"
        if self.flags.get("no_new_sessions"):
            return "cost cap"
        if (
            self.options.max_sessions is not None
            and self.totals.sessions >= self.options.max_sessions
        ):
            return "session limit"
        return None

    def run(self) -> WorkerTotals:
        client = self.register()
        try:
            harness = self.harness or get_harness(
                self.options.harness, **self.options.harness_options
            )
            workdir, env = self.prepare_checkout(
                client, sparse=bool(getattr(harness, "sparse_checkout", False))
            )
            prompt = render_worker_prompt(
                worker=self.name,
                team_size=self.options.team_size,
                goal=self.options.goal,
                oracle=self.options.oracle,
                required_approvals=self.options.required_approvals,
            )
            self.state = "idle"
            self.heartbeat()
            while (reason := self.should_stop()) is None:
                result = self.run_session(client, harness, workdir, env, prompt)
                if result.ended == "stopped" and result.detail.startswith(NO_WORK_LEFT):
                    self.status["stopped_because"] = result.detail
                    break
                if result.ended == "error":
                    self.stop.wait(min(30.0, 2.0 * (1 + self.totals.sessions % 5)))
            else:
                self.status["stopped_because"] = reason
        finally:
            self.report_stopped(client)  # the hub releases this worker's claims
            client.close()
        return self.totals

    def run_session(
        self, client: HubClient, harness: Harness, workdir: Path, env: dict[str, str], prompt: str
    ) -> SessionResult:
        started = client.call(
            "POST", "/v1/sessions", json={"harness": harness.name, "model": self.options.model}
        )["result"]
        self.state = "in_session"
        self.status.update(session=started["number"])
        self.heartbeat()
        ctx = SessionContext(
            worker=self.name,
            number=started["number"],
            workdir=workdir,
            prompt=prompt,
            env=env,
            limits=self.options.limits,
            model=self.options.model,
            api_base=self.options.api_base,
            stop=self.stop,
            pending_direct=self.pending_direct,
            channel_digest=self.channel_digest,
            on_step=self.on_step,
        )
        try:
            result = harness.run_session(ctx)
        except InvalidInput:
            raise  # a configuration problem: the person must fix it, retrying cannot
        except Exception as exc:
            log.exception("%s: session %s failed", self.name, started["number"])
            result = SessionResult("error", detail=f"{type(exc).__name__}: {exc}")
        client.call(
            "POST",
            f"/v1/sessions/{started['id']}/end",
            json={
                "ended": result.ended,
                "steps": result.steps,
                "tokens_in": result.tokens_in,
                "tokens_out": result.tokens_out,
                "cost": result.cost,
                "detail": result.detail,
            },
        )
        t = self.totals
        t.sessions += 1
        t.steps += result.steps
        t.tokens_in += result.tokens_in
        t.tokens_out += result.tokens_out
        t.cost += result.cost
        self.state = "idle"
        self.status["last_session"] = f"{result.ended}: {result.detail[:160]}"
        return result


class HeartbeatPump:
    """One thread that sends every local runtime's heartbeat, so 1,024 workers need not 2,048
    threads; each runtime also reports at session boundaries."""

    def __init__(self, runtimes: list[WorkerRuntime], interval: float = 10.0) -> None:
        self.runtimes = runtimes
        self.interval = interval
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="heartbeats", daemon=True)

    def _loop(self) -> None:
        while not self.done.wait(self.interval):
            for runtime in list(self.runtimes):
                if self.done.is_set():
                    return
                # A runtime that reported lately (a session started or ended) is known alive:
                # skipping it spares the hub a write per worker per interval at 1,024 workers.
                recent = time.monotonic() - runtime.reported < self.interval
                if runtime.state not in ("starting", "stopped") and not recent:
                    runtime.heartbeat()

    def start(self) -> HeartbeatPump:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=5)
