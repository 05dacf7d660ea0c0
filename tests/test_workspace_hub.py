"""The workspace through the real hub: git over HTTP with worker tokens, and `sw pr ...`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner
from test_workspace_support import Clone

from swarm.hub.server import BackgroundHub
from swarm.tools.client import HubClient
from swarm.tools.sw import sw


def sw_as(client: HubClient, *args: str, cwd: Path | None = None) -> tuple[int, str]:
    env = {"SWARM_HUB_URL": client.base_url, "SWARM_TOKEN": client.token or ""}
    result = CliRunner().invoke(sw, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.output


def test_pr_commands_end_to_end(
    hub: BackgroundHub, new_worker: Callable[[], HubClient], tmp_path: Path
) -> None:
    alice, bob = new_worker(), new_worker()
    a_name = alice.call("GET", "/v1/whoami")["result"]["name"]
    b_name = bob.call("GET", "/v1/whoami")["result"]["name"]
    where = alice.call("GET", "/v1/workspace")["result"]
    assert where["clone_url"].endswith("/git/workspace.git") and len(where["main"]) == 40
    url = f"{hub.url}/git/workspace.git"
    header = f"http.extraHeader=Authorization: Bearer {alice.token}"
    a = Clone(url, tmp_path / "a", a_name, config=(header,))
    header = f"http.extraHeader=Authorization: Bearer {bob.token}"
    b = Clone(url, tmp_path / "b", b_name, config=(header,))

    a.write("notes.txt", "alice\n")
    a.commit("alice's notes")
    assert "nobody pushes to main" in a.push("main", check=False)
    a.push(f"{a_name}/notes")
    b.write("notes.txt", "bob\n")
    b.commit("bob's notes")
    b.push(f"{b_name}/notes")

    code, out = sw_as(alice, "pr", "open", "-b", f"{a_name}/notes", "-t", "Alice's notes")
    assert code == 0 and out.startswith("opened #1 [open] Alice's notes"), out
    code, out = sw_as(bob, "pr", "open", "-b", f"{b_name}/notes", "-t", "Bob's notes")
    assert code == 0 and "#2" in out
    code, out = sw_as(alice, "pr", "open", "-b", f"{a_name}/nope", "-t", "x")
    assert code == 1 and "never pushed" in out
    code, out = sw_as(alice, "pr", "review", "1", "approve")
    assert code == 1 and "own PR" in out
    code, out = sw_as(bob, "pr", "review", "1", "approve")
    assert code == 0 and "approve" in out
    code, out = sw_as(bob, "pr", "show", "1")
    assert "merges cleanly" in out and "+alice" in out and f"review by {b_name}" in out
    code, out = sw_as(bob, "pr", "merge", "1")
    assert code == 0 and "merged #1 [merged by" in out, out
    code, out = sw_as(bob, "pr", "merge", "2")
    assert code == 1 and "conflict: notes.txt" in out and "Merge main into your branch" in out
    code, out = sw_as(alice, "pr", "list", "--state", "open")
    assert out.startswith("#2 [open]")

    b.git("pull", "-q", "--no-rebase", "origin", "main", check=False)
    b.write("notes.txt", "alice\nbob\n")
    b.commit("merge main")
    b.push(f"{b_name}/notes")
    code, out = sw_as(bob, "pr", "merge", "2")
    assert code == 0, out
    code, out = sw_as(alice, "pr", "close", "2")
    assert code == 1 and "already merged" in out
