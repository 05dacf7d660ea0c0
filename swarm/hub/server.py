"""Serving the hub with uvicorn, in the foreground or on a background thread."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from swarm.bootstrap import Runtime
from swarm.hub.app import create_app


def make_server(runtime: Runtime, host: str, port: int, *, log_level: str = "warning") -> uvicorn.Server:
    config = uvicorn.Config(
        create_app(runtime),
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=30,
        backlog=4096,
    )
    return uvicorn.Server(config)


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
