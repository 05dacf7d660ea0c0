"""Network for a box that has none of its own: the hub (and, for CLI agents, their model API) is
reached through this process, which listens on the box's loopback.

A box with network gets a network namespace with a loopback and nothing else (docker's
`network_mode=none`, bwrap's `--unshare-net`). On that loopback, at the hub's port, something
listens and hands each connection to `HostRelay` in the worker process, which connects it to the
hub: on docker a small relay inside the container (`INSIDE`, standard library only, run by the
image's python3) over a Unix socket bind-mounted into it; on bwrap the listening sockets
themselves, made inside the box's namespace once and passed to this process. Nothing else of
the host's network is in reach: not a database on the host's loopback, not other containers,
not the internet. For a CLI agent a CONNECT proxy (the agent's HTTPS_PROXY) opens tunnels to
the hosts its box names in `reach` only (its model API); a model API on the host's loopback is
forwarded at its own port, as the hub is (`Routes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

from swarm.sandbox import BoxSpec

CHUNK = 65536
CONNECT_LINE_LIMIT = 8192
PROXY_PORT = 3128  # the CONNECT proxy's port on a box's loopback (the next one if the hub's)
LOOPBACK = ("127.0.0.1", "localhost")  # hosts a box reaches at the same address inside
# A listening socket of the box's (bwrap), or a Unix socket's path a relay inside reaches (docker).
Where = Path | socket.socket


@dataclass(frozen=True)
class Routes:
    """What a box with network reaches, as it is seen inside: on the box's loopback, the hub's
    port (and a model API's on the host's loopback, at its port) forwarded to the host, and the
    CONNECT proxy for the hosts the box names in `reach`."""

    hub: SplitResult
    proxy_port: int
    forwards: dict[int, tuple[str, int]]  # a port on the box's loopback -> host, port outside
    # The checkout's git server when it is not the hub (Gitea): its URL outside and the port
    # on the box's loopback it is forwarded to.
    remote: tuple[SplitResult, int] | None = None

    @property
    def ports(self) -> list[int]:
        return [*self.forwards, self.proxy_port]

    @classmethod
    def of(cls, spec: BoxSpec) -> Routes | None:
        """None where the box reaches nothing: no network (a merge check), or no hub."""
        if not spec.network:
            return None
        hub = urlsplit(spec.env.get("SWARM_HUB_URL", ""))
        try:
            port = hub.port
        except ValueError:
            return None
        if not hub.hostname or not port:
            return None
        forwards = {port: (hub.hostname, port)}
        proxy = PROXY_PORT if port != PROXY_PORT else PROXY_PORT + 1
        for target in spec.reach:
            host, _, number = target.rpartition(":")
            if host in LOOPBACK and number.isdigit() and int(number) not in (*forwards, proxy):
                forwards[int(number)] = (host, int(number))
        remote = _git_server(spec.checkout)
        routed = None
        if (
            remote is not None
            and remote.hostname
            and (remote.hostname, remote.port)
            != (
                hub.hostname,
                port,
            )
        ):
            outside = remote.port or 80
            inside = outside
            while inside in (*forwards, proxy):
                inside += 1
            forwards[inside] = (remote.hostname, outside)
            routed = (remote, inside)
        return cls(hub, proxy, forwards, routed)

    def env(self, env: Mapping[str, str], reach: Iterable[str]) -> dict[str, str]:
        """`env` as it must read inside: a hub not on loopback is there (its URL and git's
        follow it), and a box that reaches more than the hub has its proxy in HTTPS_PROXY."""
        env = dict(env)
        port = self.hub.port
        rewrites: list[tuple[str, str]] = []  # git's URL inside, outside
        if (self.hub.hostname or "") not in LOOPBACK:
            inside = urlunsplit(self.hub._replace(netloc=f"127.0.0.1:{port}"))
            outside = urlunsplit(self.hub._replace(path="", query="", fragment=""))
            env["SWARM_HUB_URL"] = inside
            rewrites.append((inside, outside))
        if self.remote is not None:
            remote, at = self.remote
            user = remote.netloc.rpartition("@")[0]
            netloc = f"{user}@127.0.0.1:{at}" if user else f"127.0.0.1:{at}"
            rewrites.append(
                (
                    urlunsplit((remote.scheme, netloc, "", "", "")),
                    urlunsplit((remote.scheme, remote.netloc, "", "", "")),
                )
            )
        if rewrites:
            env["GIT_CONFIG_COUNT"] = str(len(rewrites))
            for i, (inside, outside) in enumerate(rewrites):
                env[f"GIT_CONFIG_KEY_{i}"] = f"url.{inside.rstrip('/')}/.insteadOf"
                env[f"GIT_CONFIG_VALUE_{i}"] = outside.rstrip("/") + "/"
        if tuple(reach):
            proxy = f"http://127.0.0.1:{self.proxy_port}"
            env.update(HTTPS_PROXY=proxy, https_proxy=proxy, NO_PROXY="127.0.0.1,localhost")
        return env


def _git_server(checkout: Path) -> SplitResult | None:
    """The checkout's `origin` when it is a plain-HTTP git server (Gitea): the box reaches it
    too, forwarded like the hub. An HTTPS server is not forwarded (its certificate names its
    host, not the box's loopback)."""
    config = checkout / ".git" / "config"
    if not config.is_file():
        return None
    done = subprocess.run(
        ["git", "config", "--file", str(config), "--get", "remote.origin.url"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    url = done.stdout if done.returncode == 0 else ""
    remote = urlsplit(url.strip())
    try:
        remote.port  # noqa: B018 (a bad port raises)
    except ValueError:
        return None
    return remote if remote.scheme == "http" and remote.hostname else None


# Run inside the container as `python3 -c INSIDE ready=SOCKET HOST:PORT=SOCKET ...`: listen on
# each HOST:PORT and carry every connection to its SOCKET; once listening, say so on `ready`.
INSIDE = r"""
import asyncio, sys

async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()

async def carry(path, reader, writer):
    try:
        up_reader, up_writer = await asyncio.open_unix_connection(path)
    except OSError:
        writer.close()
        return
    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
    writer.close()
    up_writer.close()

async def main():
    ready, servers = None, []
    for arg in sys.argv[1:]:
        where, path = arg.split("=", 1)
        if where == "ready":
            ready = path
            continue
        host, port = where.rsplit(":", 1)
        handler = lambda r, w, p=path: carry(p, r, w)
        servers.append(await asyncio.start_server(handler, host, int(port)))
    if not ready:
        await asyncio.Event().wait()
    # The ready connection stays open as a lifeline: the owner's process holds its end, and
    # when that process dies (even by SIGKILL) the relay reads EOF and exits, and with it
    # the container.
    reader, writer = await asyncio.open_unix_connection(ready)
    writer.write(b"ready\n")
    await writer.drain()
    while await reader.read(4096):
        pass

asyncio.run(main())
"""


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def _join(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    writer.close()
    up_writer.close()


class HostRelay:
    """The host's side of every box's relay in this process: one event loop on one thread."""

    _shared: HostRelay | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="relay", daemon=True)
        self.thread.start()

    @classmethod
    def shared(cls) -> HostRelay:
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def _call(self, coroutine: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout=30)

    def _listen(self, where: Where, handler: Any) -> asyncio.AbstractServer:
        server: asyncio.AbstractServer
        if isinstance(where, socket.socket):  # already listening, in the box's namespace
            where.setblocking(False)
            server = self._call(asyncio.start_server(handler, sock=where))
            return server
        server = self._call(asyncio.start_unix_server(handler, str(where)))
        os.chmod(where, 0o666)  # the box's user connects; the folder around it keeps others out
        return server

    def serve(
        self, routes: Routes, where: Callable[[int], Where], allowed: Callable[[], Iterable[str]]
    ) -> list[asyncio.AbstractServer]:
        """A box's routes, each port of the box's loopback served at `where(port)`."""
        servers = [
            self.forward(where(port), host, target)
            for port, (host, target) in routes.forwards.items()
        ]
        servers.append(self.connect_proxy(where(routes.proxy_port), allowed))
        return servers

    def forward(self, path: Where, host: str, port: int) -> asyncio.AbstractServer:
        """Connections to `path` (a Unix socket, or a box's listening socket) go on to
        host:port (the hub)."""

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                up_reader, up_writer = await asyncio.open_connection(host, port)
            except OSError:
                writer.close()
                return
            await _join(reader, writer, up_reader, up_writer)

        return self._listen(path, handle)

    def connect_proxy(
        self, path: Where, allowed: Callable[[], Iterable[str]]
    ) -> asyncio.AbstractServer:
        """HTTP CONNECT on `path`, to the "host:port"s `allowed()` names."""

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                writer.close()
                return
            words = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            target = words[1] if len(words) == 3 and words[0] == "CONNECT" else ""
            if target not in set(allowed()):
                writer.write(
                    b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\n\r\n"
                    b"swarm sandbox: this box reaches the hub and its model API only\n"
                )
                writer.close()
                return
            host, _, port = target.rpartition(":")
            try:
                up_reader, up_writer = await asyncio.open_connection(host, int(port))
            except (OSError, ValueError):
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
                writer.close()
                return
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await _join(reader, writer, up_reader, up_writer)

        return self._listen(path, handle)

    def ready_signal(self, path: Path) -> tuple[asyncio.AbstractServer, threading.Event]:
        """A socket the inside relay connects to once it listens; the event is set then."""
        ready = threading.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                if (await reader.readline()).strip() == b"ready":
                    ready.set()
                    # Held open until the box closes or this process dies: the relay inside
                    # exits on EOF (see INSIDE).
                    while await reader.read(4096):
                        pass
            writer.close()

        return self._listen(path, handle), ready

    def stop(self, server: asyncio.AbstractServer) -> None:
        async def close() -> None:
            server.close()

        with contextlib.suppress(Exception):
            self._call(close())
