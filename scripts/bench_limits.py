"""Peers' latency while one worker floods each of the hub's limits.

Starts `swarm hub` in its own process (default limits), registers one flooder and some peers.
For each phase (none, grep, feed, git, oversized bodies) the flooder hammers that call from
several threads while each peer loops GET /v1/ping and POST /v1/entries; prints the peers' p50
and p99 per phase and how the flooder was answered. `--json`: one {"figure", "value", "unit"}
object per line; `--quick`: 3 s a phase, within a minute.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Callable

import httpx
from _bench import Figures, database_url, hub, parser, percentile, register, workdir

PEERS = 8
FLOOD_THREADS = 8


def _flood_call(kind: str, url: str) -> Callable[[httpx.Client], int]:
    def grep(c: httpx.Client) -> int:
        return c.get(url + "/v1/grep", params={"pattern": "peer.*[0-9]+"}).status_code

    def feed(c: httpx.Client) -> int:
        return c.get(url + "/v1/feed").status_code

    def git(c: httpx.Client) -> int:
        path = "/git/workspace.git/info/refs?service=git-upload-pack"
        return c.get(url + path).status_code

    def body(c: httpx.Client) -> int:
        # Announces 200 MB and sends 1 KB (raw socket: httpx will not send a short body): the
        # hub must answer from the header, before reading the body.
        host, port = url.removeprefix("http://").split(":")
        token = c.headers["authorization"]
        head = (
            f"POST /v1/entries HTTP/1.1\r\nHost: {host}\r\nAuthorization: {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {200 * 1024**2}\r\n\r\n"
        ).encode()
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(head + b"{" * 1024)
            answer = sock.recv(64)
        return int(answer.split()[1]) if answer.startswith(b"HTTP/") else 0

    return {"grep": grep, "feed": feed, "git": git, "body": body}[kind]


def phase(
    url: str, flooder: str, peers: list[str], kind: str, seconds: float
) -> tuple[list[float], list[float], Counter[int]]:
    stop = threading.Event()
    pings: list[float] = []
    appends: list[float] = []
    answers: Counter[int] = Counter()
    lock = threading.Lock()

    def peer(token: str) -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as c:
            n = 0
            while not stop.is_set():
                t = time.perf_counter()
                c.get(url + "/v1/ping").raise_for_status()
                p = time.perf_counter() - t
                t = time.perf_counter()
                c.post(
                    url + "/v1/entries", json={"type": "OBSERVED", "body": f"peer note {n}"}
                ).raise_for_status()
                a = time.perf_counter() - t
                with lock:
                    pings.append(p * 1000)
                    appends.append(a * 1000)
                n += 1
                time.sleep(0.05)  # a peer works between calls; it is not a load generator

    def flood() -> None:
        call = _flood_call(kind, url)
        with httpx.Client(headers={"Authorization": f"Bearer {flooder}"}, timeout=30) as c:
            while not stop.is_set():
                status = call(c)
                with lock:
                    answers[status] += 1

    threads = [threading.Thread(target=peer, args=(t,)) for t in peers]
    if kind != "none":
        threads += [threading.Thread(target=flood) for _ in range(FLOOD_THREADS)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return pings, appends, answers


def main() -> None:
    args = parser(__doc__).parse_args()
    seconds = 3.0 if args.quick else 10.0
    figures = Figures(args.json)
    with (
        workdir("bench-limits-") as tmp,
        database_url("sqlite", tmp) as db_url,
        hub(db_url, tmp / "run") as process,
    ):
        tokens = [token for _name, token in register(process.url, process.operator_token, 9)]
        flooder, peers = tokens[0], tokens[1 : 1 + PEERS]
        for kind in ("none", "grep", "feed", "git", "body"):
            figures.log(f"phase: flood {kind} for {seconds:g} s")
            pings, appends, answers = phase(process.url, flooder, peers, kind, seconds)
            answered = ", ".join(f"{n}x{s}" for s, n in sorted(answers.items()))
            figures.add(f"peers' ping p50 (flood: {kind})", percentile(pings, 50), "ms")
            figures.add(f"peers' ping p99 (flood: {kind})", percentile(pings, 99), "ms", answered)
            figures.add(f"peers' append p50 (flood: {kind})", percentile(appends, 50), "ms")
            figures.add(f"peers' append p99 (flood: {kind})", percentile(appends, 99), "ms")
    figures.table()


if __name__ == "__main__":
    main()
