"""`sw pr ...`: open, list, show, review, merge and close pull requests through the hub."""

from __future__ import annotations

import subprocess
from typing import Any

import click

from swarm.tools import format as fmt
from swarm.tools.sw import _text, run

VERDICTS = {"approve": "approve", "request-changes": "request_changes", "comment": "comment"}


def pr_line(pr: dict[str, Any]) -> str:
    state = pr["state"]
    if state == "merged":
        state = f"merged by {pr['merged_by']} as {str(pr['merge_commit'])[:10]}"
    elif pr.get("abandoned"):
        state = "open, abandoned: claim its files, then sw pr take"
    approvals = f", {pr['approvals']} approval(s)" if pr.get("approvals") else ""
    return (
        f"#{pr['number']} [{state}] {fmt.one_line(pr['title'])} ({pr['author']}, "
        f"{fmt.one_line(pr['branch'])} "
        f"at {str(pr['head'])[:10]}{approvals}, {fmt.ago(pr['created_at'])})"
    )


def _detail(result: dict[str, Any], with_diff: bool) -> str:
    lines = [pr_line(result["pr"])]
    if result["pr"].get("body"):
        lines += ["", fmt.peer_block(result["pr"]["body"]), ""]
    if result["mergeable"] is True:
        lines.append("merges cleanly into main")
    elif result["mergeable"] is False:
        conflicts = ", ".join(fmt.one_line(f) for f in result["conflicts"])
        lines.append("CONFLICTS with main in: " + conflicts)
        lines.append("  fix: git fetch origin && git merge origin/main; resolve; commit; push")
    lines.append("files: " + (", ".join(fmt.one_line(f) for f in result["files"]) or "(none)"))
    for review in result["reviews"]:
        body = f": {fmt.peer_text(review['body'])}" if review["body"] else ""
        lines.append(f"review by {review['author']}: {review['verdict']}{body}")
    lines += [f"event: {fmt.one_line(e)}" for e in result["events"]]
    if with_diff:
        lines += ["", fmt.peer_block(result["diff"].rstrip()) or "(empty diff)"]
    return "\n".join(lines)


def _current_branch() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True, text=True
    )
    branch = done.stdout.strip()
    if done.returncode != 0 or branch in ("", "HEAD"):
        raise click.UsageError("name the branch (not in a git checkout on a branch)")
    return branch


@click.group()
def pr() -> None:
    """Pull requests: push your branch (git push origin HEAD:<you>/<topic>), open, merge."""


@pr.command("open")
@click.option("--branch", "-b", help="Your pushed branch (default: the current branch).")
@click.option("--title", "-t", required=True, help="What the change does, in a few words.")
@click.option("--body", "-m", default="", help="Why, and how you verified it (- reads stdin).")
def open_(branch: str | None, title: str, body: str) -> None:
    """Open a PR from your pushed branch into main."""
    payload = {"branch": branch or _current_branch(), "title": title, "body": _text(body)}

    def said(r: dict[str, Any]) -> str:
        line = "opened " + pr_line(r["pr"])
        if r.get("superseded"):
            taken = ", ".join(f"#{n}" for n in r["superseded"])
            line += f"\n  it takes over abandoned {taken} (closed, linked to it)"
        return line

    run("POST", "/v1/prs", said, json=payload)


@pr.command("list")
@click.option("--state", type=click.Choice(["open", "merged", "closed"]), help="Only these.")
@click.option("--author", help="Only this worker's (e.g. w3).")
@click.option("--limit", type=int, default=50, show_default=True)
def list_(state: str | None, author: str | None, limit: int) -> None:
    """Pull requests, newest first."""
    params: dict[str, Any] = {"limit": limit}
    params.update({k: v for k, v in (("state", state), ("author", author)) if v})
    run(
        "GET",
        "/v1/prs",
        lambda r: "\n".join(pr_line(p) for p in r["prs"]) or "(no pull requests)",
        params=params,
    )


@pr.command()
@click.argument("number", type=int)
@click.option("--diff/--no-diff", default=True, help="Show the diff against main.")
def show(number: int, diff: bool) -> None:
    """A PR: state, whether it merges cleanly, reviews, events and its diff against main."""
    run("GET", f"/v1/prs/{number}", lambda r: _detail(r, diff))


@pr.command()
@click.argument("number", type=int)
@click.argument("verdict", type=click.Choice(sorted(VERDICTS)))
@click.option("--body", "-m", default="", help="What to change, or why it is good (- = stdin).")
def review(number: int, verdict: str, body: str) -> None:
    """Review PR NUMBER: approve, request-changes or comment (you cannot approve your own)."""
    payload = {"verdict": VERDICTS[verdict], "body": _text(body)}
    run(
        "POST",
        f"/v1/prs/{number}/reviews",
        lambda r: f"reviewed #{number}: {r['review']['verdict']}",
        json=payload,
    )


@pr.command()
@click.argument("number", type=int)
@click.option(
    "--claim",
    type=int,
    help="Your claim this work is done under: the merge is refused if it lapsed meanwhile.",
)
def merge(number: int, claim: int | None) -> None:
    """Merge PR NUMBER into main; a conflict is refused with the files to resolve."""
    run(
        "POST",
        f"/v1/prs/{number}/merge",
        lambda r: "merged " + pr_line(r["pr"]),
        json={"claim": claim} if claim is not None else None,
    )


@pr.command()
@click.argument("number", type=int)
def close(number: int) -> None:
    """Close PR NUMBER without merging."""
    run("POST", f"/v1/prs/{number}/close", lambda r: "closed " + pr_line(r["pr"]))


@pr.command()
@click.argument("number", type=int)
@click.option(
    "--branch",
    "-b",
    help="Your pushed branch to continue from (default: the hub copies the PR's branch to "
    "<you>/<its topic>).",
)
def take(number: int, branch: str | None) -> None:
    """Take over abandoned PR NUMBER (its author died or gave it up): claim its files first;
    a PR of yours replaces it, then fetch your branch and go on."""

    def said(r: dict[str, Any]) -> str:
        new = r["pr"]
        return (
            f"took over #{number} as {pr_line(new)}\n"
            f"  continue: git fetch origin {new['branch']} && git checkout -B {new['branch']} "
            f"FETCH_HEAD"
        )

    run("POST", f"/v1/prs/{number}/take", said, json={"branch": branch} if branch else None)


def register(sw: click.Group) -> None:
    sw.add_command(pr)
