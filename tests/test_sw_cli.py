"""`sw` as an agent uses it: a real process, identity from the environment, plain text out."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from swarm.hub.server import BackgroundHub
from swarm.tools.client import HubClient

SW = str(Path(sys.executable).parent / "sw")


def sw(
    *args: str, token: str | None, url: str, stdin: str | None = None, retry: float = 60
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARM_")}
    env["SWARM_HUB_URL"] = url
    env["SWARM_HUB_RETRY_SECONDS"] = str(retry)
    if token:
        env["SWARM_TOKEN"] = token
    return subprocess.run(
        [SW, *args], env=env, capture_output=True, text=True, input=stdin, timeout=60, check=False
    )


@pytest.fixture
def pair(hub: BackgroundHub, new_worker: Callable[[], HubClient]) -> tuple[str, str]:
    a, b = new_worker(), new_worker()
    assert a.token and b.token
    return a.token, b.token


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_record_claim_and_see_peers_in_the_delivery_block(
    hub: BackgroundHub, pair: tuple[str, str]
) -> None:
    a, b = pair
    claimed = sw("claim", "src/parser/**", "-m", "write the parser", token=a, url=hub.url)
    assert claimed.returncode == 0, claimed.stderr
    assert claimed.stdout.startswith("recorded #1 CLAIM w1 [src/parser/**]: write the parser")
    overlap = sw("claim", "src/parser/lexer.py", "-m", "lexer", token=b, url=hub.url)
    assert "OVERLAPS claim #1 w1 [src/parser/**] active" in overlap.stdout
    assert "--- new from peers ---\n#1 CLAIM w1" in overlap.stdout
    fact = sw(
        "fact",
        "-",
        "--scope",
        "src/parser/lexer.py",
        token=a,
        url=hub.url,
        stdin="tabs are whitespace\n",
    )
    assert "recorded #3 FACT w1 [src/parser/lexer.py]: tabs are whitespace" in fact.stdout
    assert "--- direct messages for you ---\n[msg 1 dm from hub" in fact.stdout
    summary = sw("summary", "1", "parser done; pytest: 30 passed", token=a, url=hub.url)
    assert "ended claim #1 w1 [src/parser/**] completed by #4" in summary.stdout
    grep = sw("grep", "-i", "TABS", token=b, url=hub.url)
    assert grep.stdout.splitlines()[0] == "#3 FACT w1 [src/parser/lexer.py]: tabs are whitespace"


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_errors_are_one_line_with_exit_status(hub: BackgroundHub, pair: tuple[str, str]) -> None:
    a, b = pair
    sw("claim", "x.py", "-m", "x", token=a, url=hub.url)
    refused = sw("release", "1", token=b, url=hub.url)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "sw: error: claim #1 belongs to w1; only its owner can renew or release it "
        "(DM w1 to negotiate)"
    )
    bad = sw("record", "GUESS", "x", token=a, url=hub.url)
    assert bad.returncode == 1 and "unknown entry type 'GUESS'" in bad.stderr
    down = sw("tail", token=a, url="http://127.0.0.1:9", retry=1)
    assert down.returncode == 2
    assert down.stderr.startswith("sw: waiting for the hub (cannot reach the hub at")
    last = down.stderr.strip().splitlines()[-1]
    assert last.startswith("sw: error: cannot reach the hub at http://127.0.0.1:9")
    assert "Traceback" not in down.stderr
    missing = sw("tail", token=None, url=hub.url)
    assert missing.returncode == 2 and "SWARM_TOKEN not set" in missing.stderr


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_dm_and_inbox(hub: BackgroundHub, pair: tuple[str, str]) -> None:
    a, b = pair
    sw("dm", "w2", "I take the lexer", token=a, url=hub.url)
    sw("say", "parser is merged", token=a, url=hub.url)
    shown = sw("claims", token=b, url=hub.url)
    assert re.search(r"\[msg 1 dm from w1, \d+s ago\] I take the lexer", shown.stdout)
    assert "parser is merged" not in shown.stdout
    inbox = sw("inbox", token=b, url=hub.url)
    assert "[msg 2 #tasks w1" in inbox.stdout and "parser is merged" in inbox.stdout
    assert "(no new channel posts)" in sw("inbox", token=b, url=hub.url).stdout


def test_every_command_has_help_for_an_agent() -> None:
    from swarm.tools.sw import sw as group

    top = subprocess.run([SW, "--help"], capture_output=True, text=True, check=True).stdout
    for word in ("OBSERVED", "FACT", "FAIL", "CLAIM", "PATCH_SUMMARY", "topic:", "delivery"):
        assert word in top
    for name, command in group.commands.items():
        assert command.help and len(command.help) > 30, f"sw {name} needs real help"
        out = subprocess.run([SW, name, "--help"], capture_output=True, text=True, check=True)
        assert f"Usage: sw {name}" in out.stdout
