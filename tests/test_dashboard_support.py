"""Helpers for the dashboard and report tests: a run in a directory, populated through the
hub's real HTTP API (workers, entries, claims, messages, sessions, checkpoints, PRs with git)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from test_workspace_support import Clone

from swarm.bootstrap import Runtime, build_runtime
from swarm.config import Settings
from swarm.hub.server import BackgroundHub
from swarm.tools.client import HubClient


@dataclass
class Population:
    """What `populate` put into the hub, for the tests to look for."""

    workers: list[str] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)
    checkpoints: list[tuple[float, int, int]] = field(default_factory=list)
    merged_prs: list[int] = field(default_factory=list)
    conflicted_pr: int | None = None
    needle_entry: int = 0
    entries: int = 0


def start_run(run_dir: Path, workers: int = 4) -> Runtime:
    """A run directory as `swarm run` leaves it: hub.db, workspace.git, run.toml."""
    run_dir.mkdir(parents=True, exist_ok=True)
    now = time.time()
    (run_dir / "run.toml").write_text(
        f'task = "demo"\nworkers = {workers}\nharness = "sim"\nmodel = "none"\n'
        f"started_at = {now - 120}\n[budget]\nseconds = 3600\ncost = 5.0\n"
    )
    return build_runtime(Settings(run_dir=run_dir))


def populate(hub: BackgroundHub, tmp_path: Path, n: int = 4) -> Population:
    """Drive the hub as a small swarm would: every kind of record the dashboard shows."""
    out = Population()
    tmp_path.mkdir(parents=True, exist_ok=True)
    op = HubClient(hub.url, hub.runtime.operator_token)
    clients: dict[str, HubClient] = {}
    for _ in range(n):
        reg = op.register(model="sim")
        clients[reg["name"]] = HubClient(hub.url, reg["token"])
        out.workers.append(reg["name"])
        out.tokens[reg["name"]] = reg["token"]
    names = out.workers
    a, b = clients[names[0]], clients[names[1]]
    start = time.time()
    for i, (name, c) in enumerate(clients.items()):
        c.report("in_session" if i % 2 == 0 else "idle", {"iteration": i})
        session = c.call("POST", "/v1/sessions", json={"harness": "sim", "model": "none"})
        if i != 0:  # w1's session keeps running
            c.call("POST", f"/v1/sessions/{session['result']['id']}/end",
                   json={"ended": "submitted", "steps": 10 + i, "tokens_in": 1000 * (i + 1),
                         "tokens_out": 200, "cost": 0.01 * (i + 1)})  # fmt: skip
        c.record("OBSERVED", f"{name} ran the tests: 3 of 10 pass")
    needle = a.record("FACT", "the tokenizer drops trailing zebra-stripes on CRLF input")
    out.needle_entry = needle["result"]["entry"]["id"]
    claim_a = a.record("CLAIM", "fix the parser", scope=["src/parser/**"])["result"]["entry"]["id"]
    b.record("CLAIM", "parser error messages", scope=["src/parser/errors.py"])  # overlaps: hub DMs
    claim_b2 = b.record("CLAIM", "docs", scope=["docs/**"])["result"]["entry"]["id"]
    b.record("FAIL", "regex approach is too slow", refs=[claim_b2])
    clients[names[2]].record("CLAIM", "clean up everything", scope=["src/**"])  # stays overlapping
    a.call("POST", "/v1/dm", json={"to": names[1], "body": "I take the lexer, you take errors?"})
    b.call("POST", "/v1/dm", json={"to": names[0], "body": "Deal."})
    b.call("POST", "/v1/channel", json={"body": "heads-up: main is red after PR merge"})

    url = f"{hub.url}/git/workspace.git"
    clone_a = Clone(url, tmp_path / "clone-a", names[0],
                    config=(f"http.extraHeader=Authorization: Bearer {a.token}",))  # fmt: skip
    clone_b = Clone(url, tmp_path / "clone-b", names[1],
                    config=(f"http.extraHeader=Authorization: Bearer {b.token}",))  # fmt: skip
    clone_a.write("src/parser/lexer.py", "def lex(text):\n    return text.split()\n")
    clone_a.commit("lexer: split on whitespace")
    clone_a.push(f"{names[0]}/lexer")
    pr1 = a.call("POST", "/v1/prs", json={"branch": f"{names[0]}/lexer", "title": "A lexer",
                                          "body": "Splits input into tokens."})  # fmt: skip
    n1 = pr1["result"]["pr"]["number"]
    b.call("POST", f"/v1/prs/{n1}/reviews", json={"verdict": "approve", "body": "looks right"})
    b.call("POST", f"/v1/prs/{n1}/merge")  # b merges a's work
    out.merged_prs.append(n1)
    a.record("PATCH_SUMMARY", f"merged PR #{n1}: lexer", refs=[claim_a], scope=["src/parser/**"])

    clone_b.write("src/parser/lexer.py", "def lex(text):\n    return list(text)\n")
    clone_b.commit("lexer: characters")
    clone_b.push(f"{names[1]}/lexer-chars")
    pr2 = b.call("POST", "/v1/prs", json={"branch": f"{names[1]}/lexer-chars",
                                          "title": "Character lexer"})  # fmt: skip
    n2 = pr2["result"]["pr"]["number"]
    try:
        b.call("POST", f"/v1/prs/{n2}/merge")
    except Exception as exc:  # the refusal is what we want recorded
        assert "conflict" in str(exc).lower(), exc
    out.conflicted_pr = n2

    for k, (passed, total) in enumerate([(0, 10), (3, 10), (5, 10), (8, 10)]):
        when = start + 10 * k
        tests = {f"hidden/test_x.py::test_{n}": "passed" if n < passed else "failed"
                 for n in range(total)}  # fmt: skip
        op.call("POST", "/v1/checkpoints", json={"time": when, "commit": f"{k:040x}",
                                                 "passed": passed, "total": total,
                                                 "tests": tests})  # fmt: skip
        out.checkpoints.append((when, passed, total))
    out.entries = sum(hub.runtime.context.count_by_type().values())
    for c in clients.values():
        c.close()
    op.close()
    return out


def serve_run(tmp_path: Path) -> Iterator[BackgroundHub]:
    """A hub on a fresh run directory (the body of the tests' `run_hub` fixture)."""
    runtime = start_run(tmp_path / "run")
    with BackgroundHub(runtime) as server:
        yield server
    runtime.close()
