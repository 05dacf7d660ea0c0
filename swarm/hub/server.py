"""Serving the hub with uvicorn, in the foreground or on a background thread."""

from __future__ import annotations

import contextlib
import gc
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import uvicorn

from swarm.bootstrap import Runtime
from swarm.hub.app import create_app
from swarm.worker.logpipe import LogPipe


def make_server(
    runtime: Runtime,
    host: str,
    port: int,
    *,
    log_level: str = "warning",
    dedicated_process: bool = False,
) -> uvicorn.Server:
    """A uvicorn server for the hub. `dedicated_process`: this process is only a hub, so once
    started the interpreter is tuned for it (see `tune_interpreter`)."""
    app = create_app(runtime)
    if dedicated_process:
        app.router.on_startup.append(tune_interpreter)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=30,
        backlog=4096,
    )
    return uvicorn.Server(config)


# CPython collects the young generation when container allocations outnumber deallocations by
# threshold0 (700 by default), and deallocations of old objects count too, so under load the
# young generation holds every object of every request in flight. With 256 appends waiting on
# a group commit that is ~28,000 objects: each pass took ~1.8 ms, ~150 passes in 3 s, about a
# tenth of the hub's CPU (measured). Nearly all of the hub's garbage is freed by reference
# counting; the collector is only for cycles, and 20,000 allocations of them is a few megabytes.
GC_YOUNG_THRESHOLD = 20_000
# The event loop and the group-commit writer thread share one GIL. The writer releases it for
# every SQLite step and PostgreSQL round trip, and to take it back from a busy event loop it
# waits until the loop is made to let go, after the switch interval: CPython's 5 ms made each
# batch wait on most of its statements while 256 callers waited on the batch. At 0.5 ms the
# appends/ping ratio (median of 4 rounds, scripts/bench_context.py's load) went from 0.42-0.45
# to 0.48-0.59 on SQLite (three runs) and from 0.48 to 0.56 on PostgreSQL.
SWITCH_INTERVAL = 0.0005


def tune_interpreter() -> None:
    """For a process that is only a hub. Move what is alive at startup (modules, the app, the
    runtime) out of the collector's reach with `gc.freeze()`: full collections of that heap
    stalled every request for ~100 ms a few times a minute under load. Raise the young
    generation's threshold and shorten the GIL's switch interval (see above)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD)
    sys.setswitchinterval(SWITCH_INTERVAL)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class BackgroundHub:
    """A hub on a thread of this process: for `swarm run`, the tests and the benchmarks."""

    def __init__(self, runtime: Runtime, host: str = "127.0.0.1", port: int = 0) -> None:
        self.runtime = runtime
        self.host = host
        self.port = port or free_port(host)
        self.server = make_server(runtime, self.host, self.port)
        self.thread = threading.Thread(target=self.server.run, name="hub", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> BackgroundHub:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the hub did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> BackgroundHub:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


class HubProcess:
    """`swarm hub` in its own process (its own GIL): for runs, load tests and benchmarks."""

    def __init__(
        self,
        run_dir: Path,
        *,
        database_url: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        env: dict[str, str] | None = None,
        forward: Callable[[str], None] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.forward = forward  # the hub's important log lines, outside the run directory
        self.log: LogPipe | None = None
        self.host = host
        self.port = port or free_port(host)
        self.operator_token = "swo_" + secrets.token_urlsafe(24)
        self.env = {
            **os.environ,
            **(env or {}),
            "SWARM_RUN_DIR": str(run_dir),
            "SWARM_HOST": host,
            "SWARM_PORT": str(self.port),
            "SWARM_OPERATOR_TOKEN": self.operator_token,
        }
        if database_url:
            self.env["SWARM_DATABASE_URL"] = database_url
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> HubProcess:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.log is not None:  # started again: the last one's lines are written by now
            self.log.close()
        # Through a pipe, so the log survives a full run directory (swarm.worker.logpipe).
        self.log = log = LogPipe(self.run_dir / "hub.log", forward=self.forward)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "swarm", "hub"],
            env=self.env,
            stdout=log.child_fd,
            stderr=log.child_fd,
            # Its own session: Ctrl-C on the terminal reaches the run, which stops the hub last
            # (after the workers released their claims and the final score was recorded).
            start_new_session=True,
        )
        log.started()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                log.close()
                tail = "\n".join(log.tail)[-2000:]
                raise RuntimeError(f"the hub exited with {self.process.returncode}:\n{tail}")
            with contextlib.suppress(httpx.TransportError):  # not listening yet
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"the hub did not answer on {self.url} within {timeout}s")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log is not None:
            self.log.close()

    def __enter__(self) -> HubProcess:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
