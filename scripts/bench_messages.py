"""Message delivery latency through a `swarm hub` process, on SQLite and PostgreSQL.

  * DMs: 256 workers poll GET /v1/whoami (a cheap worker call; its answer carries the delivery
    block) every 0.5-1.0 s (uniform, like a harness between tool calls), while 8 more workers
    DM random pollers. Latency = from the sender's POST /v1/dm returning to the recipient's
    next call returning that DM in `delivery.messages`. The polling pace alone accounts for
    about half the mean interval (~0.4 s); the hub's own share is the whoami latency.
  * Channel digest: the same 256 workers poll GET /v1/inbox at the same pace while the operator
    posts to the tasks channel; per post, the time until each worker's next inbox returns it,
    and until all 256 have it.

Load: Python asyncio + httpx from this process, one AsyncClient per worker, each with its own
token (registered with POST /v1/workers).

    .venv/bin/python scripts/bench_messages.py [--quick] [--json] [--engine sqlite|postgres|both]
        [--workers 256] [--senders 8] [--seconds 20] [--interval 0.5 1.0]
"""

from __future__ import annotations

import asyncio
import random
import ssl
import time
from typing import Any

import _bench as B
import httpx


def _client(url: str, token: str, ctx: ssl.SSLContext) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url,
        headers={"Authorization": f"Bearer {token}"},
        limits=httpx.Limits(max_connections=2, max_keepalive_connections=2),
        timeout=60,
        verify=ctx,
    )


async def dm_phase(
    url: str,
    pollers: list[tuple[str, str]],
    senders: list[tuple[str, str]],
    seconds: float,
    interval: tuple[float, float],
    send_interval: float,
) -> dict[str, Any]:
    ctx = ssl.create_default_context()
    sent: dict[str, float] = {}  # DM body (unique) -> when the sender's POST returned
    received: dict[str, float] = {}  # DM body -> when the recipient's call returned it
    call_ms: list[float] = []
    send_ms: list[float] = []
    errors = 0
    loop = asyncio.get_running_loop()
    stop = loop.time() + seconds
    rand = random.Random(5)
    names = [n for n, _ in pollers]

    async def poll(token: str, seed: int) -> None:
        nonlocal errors
        r = random.Random(seed)
        async with _client(url, token, ctx) as c:
            await asyncio.sleep(r.uniform(0, interval[1]))
            while loop.time() < stop + 2 * interval[1]:  # drain: late DMs still arrive
                t0 = time.perf_counter()
                try:
                    resp = await c.get("/v1/whoami")
                    resp.raise_for_status()
                except httpx.HTTPError:
                    errors += 1
                    continue
                t1 = time.perf_counter()
                call_ms.append((t1 - t0) * 1000)
                for m in resp.json()["delivery"]["messages"]:
                    received.setdefault(m["body"], t1)
                await asyncio.sleep(r.uniform(*interval))

    async def send(token: str, k: int) -> None:
        nonlocal errors
        async with _client(url, token, ctx) as c:
            n = 0
            while loop.time() < stop:
                body = f"dm {k}-{n}: please look at src/swarm/hub/app.py before merging"
                n += 1
                t0 = time.perf_counter()
                try:
                    resp = await c.post("/v1/dm", json={"to": rand.choice(names), "body": body})
                    resp.raise_for_status()
                except httpx.HTTPError:
                    errors += 1
                    continue
                t1 = time.perf_counter()
                sent[body] = t1
                send_ms.append((t1 - t0) * 1000)
                await asyncio.sleep(send_interval * rand.uniform(0.5, 1.5))

    await asyncio.gather(
        *(poll(t, i) for i, (_n, t) in enumerate(pollers)),
        *(send(t, k) for k, (_n, t) in enumerate(senders)),
    )
    # A DM can show up before its sender's POST has returned (the recipient's call ran in
    # between): those count as 0.
    latency = [max(0.0, received[b] - t) * 1000 for b, t in sent.items() if b in received]
    return {
        "latency": latency,
        "lost": sum(1 for b in sent if b not in received),
        "sent": len(sent),
        "call_ms": call_ms,
        "send_ms": send_ms,
        "errors": errors,
    }


async def channel_phase(
    url: str,
    operator_token: str,
    pollers: list[tuple[str, str]],
    posts: int,
    gap: float,
    interval: tuple[float, float],
) -> dict[str, Any]:
    ctx = ssl.create_default_context()
    posted: dict[str, float] = {}
    got: dict[str, list[float]] = {}
    call_ms: list[float] = []
    errors = 0
    loop = asyncio.get_running_loop()
    done = asyncio.Event()

    async def poll(token: str, seed: int) -> None:
        nonlocal errors
        r = random.Random(seed)
        async with _client(url, token, ctx) as c:
            await asyncio.sleep(r.uniform(0, interval[1]))
            while not done.is_set():
                t0 = time.perf_counter()
                try:
                    resp = await c.get("/v1/inbox", params={"limit": 500})
                    resp.raise_for_status()
                except httpx.HTTPError:
                    errors += 1
                    continue
                t1 = time.perf_counter()
                call_ms.append((t1 - t0) * 1000)
                for m in resp.json()["result"]["channel"]:
                    got.setdefault(m["body"], []).append(t1)
                await asyncio.sleep(r.uniform(*interval))

    async def post() -> None:
        nonlocal errors
        headers = {"Authorization": f"Bearer {operator_token}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60, verify=ctx) as c:
            await asyncio.sleep(2 * interval[1])  # every poller is in its loop
            for k in range(posts):
                body = f"post {k}: everyone, rebase on main before your next merge"
                resp = await c.post("/v1/operator/channel", json={"body": body})
                resp.raise_for_status()
                posted[body] = time.perf_counter()
                await asyncio.sleep(gap)
            deadline = loop.time() + 10 + 3 * interval[1]
            while loop.time() < deadline and any(
                len(got.get(b, ())) < len(pollers) for b in posted
            ):
                await asyncio.sleep(0.1)
        done.set()

    await asyncio.gather(*(poll(t, 1000 + i) for i, (_n, t) in enumerate(pollers)), post())
    per_worker = [max(0.0, t - posted[b]) * 1000 for b in posted for t in got.get(b, ())]
    to_all = [
        max(0.0, max(got[b]) - posted[b]) * 1000
        for b in posted
        if len(got.get(b, ())) >= len(pollers)
    ]
    return {
        "per_worker": per_worker,
        "to_all": to_all,
        "complete": len(to_all),
        "posts": len(posted),
        "call_ms": call_ms,
        "errors": errors,
    }


def main() -> None:
    p = B.parser(__doc__)
    p.add_argument("--workers", type=int, default=256)
    p.add_argument("--senders", type=int, default=8)
    p.add_argument("--seconds", type=float, default=None, help="Length of the DM phase.")
    p.add_argument("--interval", type=float, nargs=2, default=(0.5, 1.0))
    args = p.parse_args()
    quick = args.quick
    seconds = args.seconds or (5.0 if quick else 30.0)
    posts = 2 if quick else 10
    if quick and args.workers == 256:
        args.workers, args.senders = 64, 4  # registration alone takes ~20 s for 264 workers
    interval = (args.interval[0], args.interval[1])
    figures = B.Figures(args.json)
    figures.log(f"machine: {B.machine()}")
    try:
        import uvloop

        run = uvloop.run
    except ImportError:  # pragma: no cover
        run = asyncio.run
    with B.workdir("swarm-bench-messages-") as work:
        for engine in B.engines(args.engine):
            with B.database_url(engine, work) as url, B.hub(url, work / f"run-{engine}") as hub:
                crew = B.register(hub.url, hub.operator_token, args.workers + args.senders)
                pollers, senders = crew[: args.workers], crew[args.workers :]
                tag = {"engine": engine}
                figures.log(f"{engine}: DMs, {args.workers} pollers, {seconds}s")
                dm = run(dm_phase(hub.url, pollers, senders, seconds, interval, 0.25))
                lat = dm["latency"]
                figures.add("DM latency p50", B.percentile(lat, 50), "ms", **tag)
                figures.add("DM latency p99", B.percentile(lat, 99), "ms", **tag)
                figures.add(
                    "DMs delivered",
                    len(lat),
                    "count",
                    f"of {dm['sent']} sent ({dm['sent'] / seconds:.0f}/s), {dm['lost']} not seen",
                    **tag,
                )
                figures.add("whoami p50 (poll call)", B.percentile(dm["call_ms"], 50), "ms", **tag)
                figures.add("whoami p99 (poll call)", B.percentile(dm["call_ms"], 99), "ms", **tag)
                figures.add(
                    "whoami calls/s",
                    len(dm["call_ms"]) / (seconds + 2 * interval[1]),
                    "req/s",
                    **tag,
                )
                figures.add("POST /v1/dm p50", B.percentile(dm["send_ms"], 50), "ms", **tag)
                figures.log(f"{engine}: channel digest, {posts} posts")
                ch = run(channel_phase(hub.url, hub.operator_token, pollers, posts, 1.5, interval))
                figures.add(
                    "channel post -> a worker's inbox p50",
                    B.percentile(ch["per_worker"], 50),
                    "ms",
                    **tag,
                )
                figures.add(
                    "channel post -> a worker's inbox p99",
                    B.percentile(ch["per_worker"], 99),
                    "ms",
                    **tag,
                )
                figures.add(
                    f"channel post -> all {args.workers} inboxes p50",
                    B.percentile(ch["to_all"], 50),
                    "ms",
                    f"{ch['complete']} of {ch['posts']} posts reached all",
                    **tag,
                )
                figures.add(
                    f"channel post -> all {args.workers} inboxes max",
                    max(ch["to_all"]) if ch["to_all"] else float("nan"),
                    "ms",
                    **tag,
                )
                figures.add("inbox p50 (poll call)", B.percentile(ch["call_ms"], 50), "ms", **tag)
                figures.add("inbox p99 (poll call)", B.percentile(ch["call_ms"], 99), "ms", **tag)
                if dm["errors"] or ch["errors"]:
                    figures.add("errors", dm["errors"] + ch["errors"], "count", **tag)
    figures.table()


if __name__ == "__main__":
    main()
