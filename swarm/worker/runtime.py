"""The worker runtime: register, clone, then run harness sessions back to back until the budget
ends. The cooperation loop lives in the prompt; this only provides the harness, tools and env."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from swarm.diskfull import SESSION_PREFIX, text_says_full
from swarm.errors import InvalidInput
from swarm.harness import Harness, SessionContext, SessionLimits, SessionResult, get_harness
from swarm.sandbox import BoxSpec, Sandbox, SandboxLimits, get_sandbox
from swarm.sandbox.env import agent_env
from swarm.switches import ENV
from swarm.tasks.environment import PythonEnv
from swarm.tools import format as fmt
from swarm.tools.client import HubClient, HubError, retryable
from swarm.worker.models import pick_model
from swarm.worker.prompt import render_worker_prompt

log = logging.getLogger("swarm.worker")

NO_WORK_LEFT = "no work left"
OPEN_STATES = ("active", "lapsed")  # a claim not ended yet

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
    oracle: str | None = None  # the task's original program, run with `sw oracle`: its name
    conceal: tuple[str, ...] = ()  # paths masked in every session's sandbox (see BoxSpec.hidden)
    required_approvals: int = 0
    max_sessions: int | None = None
    # {"id", "name", "token"} of a worker this runtime takes up again (a restarted process, a
    # resumed run) instead of registering a new one.
    identity: dict[str, Any] | None = None
    sandbox: str = "none"  # swarm.sandbox backend for every command of every session
    sandbox_limits: SandboxLimits = field(default_factory=SandboxLimits.from_env)
    # The task's [environment]: its venv first on PATH (read-only inside the sandbox), and
    # the container image of the docker sandbox.
    python_env: PythonEnv | None = None
    image: str | None = None
    # The switches this worker was told the run has (SWARM_WITHOUT); None: take the hub's.
    without: tuple[str, ...] | None = None


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


class WorkerRuntime:
    def __init__(
        self,
        options: WorkerOptions,
        *,
        stop: threading.Event | None = None,
        harness: Harness | None = None,
        on_registered: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.options = options
        self.on_registered = on_registered
        self.stop = stop or threading.Event()
        self.harness = harness
        self.totals = WorkerTotals()
        self.name = "?"
        self.client: HubClient | None = None
        self.state = "starting"
        self.status: dict[str, Any] = {}
        self.flags: dict[str, Any] = {}
        self.reported = 0.0  # time.monotonic() of the last heartbeat that reached the hub
        # Writes a failed session could not make (the hub's disk was full): sent before the next.
        self.unsent: list[tuple[str, dict[str, Any]]] = []
        self._reporting = threading.RLock()
        self.sandbox: Sandbox = get_sandbox(options.sandbox)
        self.without: tuple[str, ...] = ()  # the run's switches, as the hub says (register)

    # -- set-up ---------------------------------------------------------------------------
    def register(self) -> HubClient:
        info = self.options.identity
        if info is None:
            with HubClient(
                self.options.hub_url, self.options.join_token, timeout=HUB_TIMEOUT
            ) as joiner:
                info = joiner.register(None if self.options.model_mix else self.options.model)
            if self.on_registered is not None:
                self.on_registered(info)
        self.name = info["name"]
        self.options.model = pick_model(self.options.model, self.options.model_mix, info["id"])
        self.client = HubClient(self.options.hub_url, info["token"], timeout=HUB_TIMEOUT)
        if self.options.identity is not None:
            # Taken up again: what the previous process held is stale (its checkout is gone),
            # so its claims are released now rather than left to lapse.
            self.client.call("POST", "/v1/status", json={"state": "stopped", "status": {}})
        self.without = tuple(self.client.call("GET", "/v1/whoami")["result"].get("without", ()))
        expected = self.options.without
        if expected is not None and tuple(expected) != self.without:
            raise InvalidInput(
                f"this worker was started with {ENV}={','.join(expected)!r} but the hub at "
                f"{self.options.hub_url} runs without {','.join(self.without) or 'nothing'!r}: "
                f"give both the same {ENV} (the hub's is what counts)"
            )
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
        workdir.parent.chmod(0o700)  # checkouts hold their worker's token (.git/config)
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
        # The worker's token rides in the config (http.extraHeader): readable by its owner only.
        (workdir / ".git" / "config").chmod(0o600)
        options = self.options
        env = session_env(options.hub_url, client.token, self.name, options.python_env)
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
        if "channel" in self.without:
            return ""
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

    def fail_claims(self, client: HubClient, number: int, detail: str) -> None:
        """A failed session (a disk full, a crash in the harness) leaves no claim open: a FAIL
        that says why ends them, so the reason is in the context for everyone (in a run without
        the context, they are released). A hub that cannot take it now (its disk is full too)
        gets it before this worker's next session: until then the claims stay this worker's,
        and nobody starts the same unit twice."""
        if "claims" in self.without:
            return
        try:
            self._fail_open_claims(client, number, detail)
        except HubError as exc:
            if not retryable(exc):
                log.warning("%s: could not end the failed session's claims: %s", self.name, exc)
                return
            log.warning("%s: the FAIL of session %d waits for the hub: %s", self.name, number, exc)
            self.unsent.append(("fail", {"number": number, "detail": detail}))

    def _fail_open_claims(self, client: HubClient, number: int, detail: str) -> None:
        # Lapsed claims too: a FAIL still ends them, with the reason.
        listed = client.call("GET", "/v1/claims", params={"mine": True, "all": True, "limit": 100})
        ids = [int(c["id"]) for c in listed["result"]["claims"] if c["state"] in OPEN_STATES]
        if ids and "context" in self.without:
            for claim_id in ids:
                client.call("POST", f"/v1/claims/{claim_id}/release")
        elif ids:
            client.record("FAIL", _fail_body(number, detail), refs=ids)

    def send_unsent(self, client: HubClient) -> None:
        """Deliver what a failed session could not tell the hub (its FAIL, its end), oldest
        first; raises HubError while the hub still cannot take them."""
        while self.unsent:
            kind, what = self.unsent[0]
            if kind == "fail":
                self._fail_open_claims(client, int(what["number"]), str(what["detail"]))
            else:
                client.call("POST", f"/v1/sessions/{what['id']}/end", json=what["end"])
            self.unsent.pop(0)

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
            # (A run with switches gets the sim's switch-aware policy, which needs every file.)
            sparse = bool(getattr(harness, "sparse_checkout", False)) and not self.without
            workdir, env = self.prepare_checkout(client, sparse=sparse)
            prompt = render_worker_prompt(
                worker=self.name,
                team_size=self.options.team_size,
                goal=self.options.goal,
                oracle=self.options.oracle,
                required_approvals=self.options.required_approvals,
                without=self.without,
            )
            self.state = "idle"
            self.heartbeat()
            while (reason := self.should_stop()) is None:
                try:
                    self.send_unsent(client)
                    result = self.run_session(client, harness, workdir, env, prompt)
                except HubError as exc:
                    if not retryable(exc):
                        raise
                    # The hub stayed away longer than the client's retries: wait, go on; the
                    # worker exiting for good would leave its share of the work undone.
                    log.warning("%s: the hub is unreachable: %s", self.name, exc.message)
                    self.status["last_session"] = f"hub unreachable: {exc.message[:160]}"
                    self.stop.wait(5.0)
                    continue
                if result.ended == "stopped" and result.detail.startswith(NO_WORK_LEFT):
                    self.status["stopped_because"] = result.detail
                    break
                if result.ended == "error":
                    self.stop.wait(min(30.0, 2.0 * (1 + self.totals.sessions % 5)))
            else:
                self.status["stopped_because"] = reason
        finally:
            with contextlib.suppress(HubError):  # the FAIL says why; the stop releases anyway
                self.send_unsent(client)
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
            without=self.without,
        )
        ctx.box = self.sandbox.open(
            session_box(
                self.name,
                workdir,
                env,
                self.options.sandbox_limits,
                harness,
                ctx,
                python_env=self.options.python_env,
                image=self.options.image,
                hidden=tuple(Path(p) for p in self.options.conceal),
            )
        )
        try:
            result = harness.run_session(ctx)
        except InvalidInput:
            raise  # a configuration problem: the person must fix it, retrying cannot
        except Exception as exc:
            log.exception("%s: session %s failed", self.name, started["number"])
            result = SessionResult("error", detail=f"{type(exc).__name__}: {exc}")
        finally:
            ctx.box.close()
        if result.ended == "error":
            if disk_full(result.detail) and not result.detail.startswith(SESSION_PREFIX):
                result = dataclasses.replace(result, detail=f"{SESSION_PREFIX}{result.detail}")
            self.fail_claims(client, started["number"], result.detail)
        end = {
            "ended": result.ended,
            "steps": result.steps,
            "tokens_in": result.tokens_in,
            "tokens_out": result.tokens_out,
            "cost": result.cost,
            "detail": result.detail,
        }
        try:
            client.call("POST", f"/v1/sessions/{started['id']}/end", json=end)
        except HubError as exc:
            if not retryable(exc):
                raise
            log.warning("%s: the end of session %d waits for the hub", self.name, started["number"])
            self.unsent.append(("end", {"id": started["id"], "end": end}))
        t = self.totals
        t.sessions += 1
        t.steps += result.steps
        t.tokens_in += result.tokens_in
        t.tokens_out += result.tokens_out
        t.cost += result.cost
        self.state = "idle"
        self.status["last_session"] = f"{result.ended}: {result.detail[:160]}"
        return result


def disk_full(detail: str) -> bool:
    """A session's failure that a full disk caused (the worker's checkout, or the hub's)."""
    # The hub's 507s say "disk is full" (a write refused) or "disk is nearly full" (its guard).
    return text_says_full(detail) or "disk is full" in detail or "disk is nearly full" in detail


def session_env(
    hub_url: str, token: str, worker: str, python_env: PythonEnv | None = None
) -> dict[str, str]:
    """The environment of a worker's agent. Built from an allow-list: nothing else of this
    process's environment (the join token, a deployment's secrets) reaches the agent. The
    task's environment, if it has one, comes first on PATH. (A task's oracle is run with
    `sw oracle`: no path to it is given, none would be inside the sandbox.)"""
    env = agent_env(hub_url=hub_url, token=token, worker=worker)
    if python_env is not None:
        env["PATH"] = os.pathsep.join([str(python_env.bin_dir), env["PATH"]])
        env["VIRTUAL_ENV"] = str(python_env.path)
    return env


def session_box(
    worker: str,
    workdir: Path,
    env: dict[str, str],
    limits: SandboxLimits,
    harness: Harness | None,
    ctx: SessionContext | None = None,
    *,
    python_env: PythonEnv | None = None,
    image: str | None = None,
    hidden: tuple[Path, ...] = (),
) -> BoxSpec:
    """What a session's sandbox holds (also `swarm sandbox shell`'s): the checkout, the
    environment, and what more the harness and the task need: the CLI and the task's
    environment read-only, the model API's host, the task's image."""
    paths = getattr(harness, "sandbox_paths", None)
    reach = getattr(harness, "sandbox_reach", None)
    return BoxSpec(
        name=worker,
        checkout=workdir,
        env=env,
        limits=limits,
        extra_ro=(
            *(paths(env) if paths else ()),
            *(python_env.ro_paths() if python_env else ()),
        ),
        reach=tuple(reach(ctx.api_base if ctx else None)) if reach else (),
        image=image,
        hidden=hidden,
    )


def _fail_body(number: int, detail: str) -> str:
    return (
        f"session {number} failed: {detail[:600].rstrip('.') or 'no detail'}. Its claims end "
        "here so peers can take the work up."
    )


class IdentityFile:
    """The identities (id, name, token) of a worker process's workers, kept in a file only its
    owner can read, so a restarted process takes up the same workers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.known: list[dict[str, Any]] = []
        if path.is_file():
            self.known = list(json.loads(path.read_text() or "[]"))

    def get(self, index: int) -> dict[str, Any] | None:
        return self.known[index] if index < len(self.known) else None

    def add(self, identity: dict[str, Any]) -> None:
        with self._lock:
            self.known.append({k: identity[k] for k in ("id", "name", "token")})
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_suffix(".tmp")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump(self.known, handle)
            os.replace(temporary, self.path)


class HeartbeatPump:
    """A few threads that send every local runtime's heartbeat, so 1,024 workers need not 2,048
    threads; each runtime also reports at session boundaries.

    The reports of one round go out `SENDERS` at a time: sent one after another, 256 workers'
    reports took longer than the hub's dead-after time once the hub answered in 100 ms, and
    live workers were declared dead (scripts/bench_sandbox.py's 256-worker runs)."""

    SENDERS = 8

    def __init__(self, runtimes: list[WorkerRuntime], interval: float = 10.0) -> None:
        self.runtimes = runtimes
        self.interval = interval
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="heartbeats", daemon=True)

    def _due(self) -> list[WorkerRuntime]:
        # A runtime that reported lately (a session started or ended) is known alive: skipping
        # it spares the hub a write per worker per interval at 1,024 workers.
        now = time.monotonic()
        return [
            runtime
            for runtime in list(self.runtimes)
            if runtime.state not in ("starting", "stopped")
            and now - runtime.reported >= self.interval
        ]

    def _send(self, runtime: WorkerRuntime) -> None:
        if not self.done.is_set():
            runtime.heartbeat()

    def _loop(self) -> None:
        with ThreadPoolExecutor(self.SENDERS, thread_name_prefix="heartbeat") as senders:
            while not self.done.wait(self.interval):
                # The round ends when every report of it has been answered (or failed).
                list(senders.map(self._send, self._due()))

    def start(self) -> HeartbeatPump:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=5)
