"""`sw`: the swarm tool for agents. Identity comes only from SWARM_HUB_URL and SWARM_TOKEN."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from swarm.tools import format as fmt
from swarm.tools.client import HubClient, HubError

TOP_HELP = """\
sw: share knowledge, claim work, talk and merge with your peers in the swarm.

\b
Every command prints its result, then a delivery block: the newest entries
your peers recorded since your last call (with a grep for the rest) and
direct messages sent to you. Read it: it is how you learn what others found.

\b
Entry types (the shared context is append-only and everyone can grep it):
  OBSERVED       something you saw (a test output, a behaviour, a file's shape)
  FACT           something you established and verified; others rely on it
  FAIL           an approach that did not work, and why (so nobody repeats it)
  CLAIM          "I am working on this scope"; has a lease (renew it, release it)
  PATCH_SUMMARY  what you changed, why, and the verification evidence

\b
Scopes name what a claim covers: repository paths or globs (src/parser/**,
src/*.py, docs/api.md; a directory covers everything below it), symbols in
a file (src/text.py::pluralize, src/text.py::Inflector.camelize) or topics
(topic:error-messages). Two symbols overlap only if they are the same one
or a class and its method; a path overlaps every symbol of its files. Claim
the functions you will change, not their whole file, so peers can work on
the file's other functions. Claiming a scope that overlaps another worker's
active claim tells both of you, so you can agree who does what by DM.

\b
Typical loop: sw inbox; sw tail; sw claims; sw workers; sw grep ...; sw claim ...;
(work, test) ; sw pr open ...; sw pr merge N; sw summary CLAIM_ID "..."

\b
When the task is to rebuild a program, sw oracle ARGS... [< input] runs the
original on the hub (you can run it, not read it) and prints what it printed,
exiting with its status: see sw oracle --help.

Text arguments given as - are read from standard input.
Exit status: 0 ok, 1 the hub refused (the message says why), 2 usage or connection error.
"""


def _say_waiting(error: HubError, seconds: float) -> None:
    """The agent (or person) sees why the command is slow, not a silent hang."""
    click.echo(
        f"sw: waiting for the hub ({error.message[:200]}); retrying in {seconds:.1f}s "
        "(up to SWARM_HUB_RETRY_SECONDS in all) …",
        err=True,
    )


def _client() -> HubClient:
    try:
        return HubClient.from_env(on_wait=_say_waiting)
    except HubError as exc:
        raise click.UsageError(exc.message) from exc


def _text(value: str) -> str:
    return sys.stdin.read() if value == "-" else value


def emit(data: dict[str, Any], render: Callable[[Any], str]) -> None:
    out = render(data.get("result"))
    block = fmt.delivery(data.get("delivery"))
    click.echo("\n".join(part for part in (out, block) if part))


def run(method: str, path: str, render: Callable[[Any], str], **kwargs: Any) -> None:
    with _client() as client:
        emit(client.call(method, path, **kwargs), render)


def _duration(text: str | None) -> float | None:
    """'90s', '10m', '2h' or a number of seconds → seconds ago as a timestamp."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not match:
        raise click.BadParameter(f"{text!r} is not a duration like 90s, 10m, 2h or 1d")
    scale = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
    return time.time() - float(match.group(1)) * scale


class SwGroup(click.Group):
    """Turns hub refusals and connection failures into one clear line and an exit status."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HubError as exc:
            status = 2 if exc.status == 0 else 1
            # A refusal can quote peers (a branch name, the merge check's output of their code).
            click.echo(f"sw: error: {fmt.peer_text(exc.message)}", err=True)
            for name in exc.payload.get("files", []) or []:
                click.echo(f"  conflict: {fmt.one_line(name)}", err=True)
            if exc.payload.get("output"):
                click.echo(fmt.peer_block(exc.payload["output"]), err=True)
            ctx.exit(status)


@click.group(cls=SwGroup, help=TOP_HELP, context_settings={"help_option_names": ["-h", "--help"]})
def sw() -> None:
    """The group itself does nothing: its commands do (see TOP_HELP)."""


def _entries_text(result: dict[str, Any], full: bool = False) -> str:
    rows = result.get("entries", [])
    if not rows:
        return "(no entries)"
    text = "\n".join(fmt.entry(e, full=full) for e in rows)
    if result.get("truncated"):
        text += "\n(more matches: narrow the pattern, or pass --before <smallest id shown>)"
    return text


def _recorded(result: dict[str, Any]) -> str:
    lines = [f"recorded {fmt.entry(result['entry'])}"]
    for c in result.get("overlaps", []):
        lines.append(f"OVERLAPS {fmt.claim(c)} -- its owner was told; agree by DM who does what")
    for c in result.get("ended", []):
        lines.append(f"ended {fmt.claim(c)}")
    return "\n".join(lines)


def _record(
    kind: str,
    body: str,
    scope: tuple[str, ...] = (),
    refs: tuple[int, ...] = (),
    lease: float | None = None,
) -> None:
    payload: dict[str, Any] = {
        "type": kind,
        "body": _text(body),
        "scope": list(scope),
        "refs": list(refs),
    }
    if lease is not None:
        payload["lease_seconds"] = lease
    run("POST", "/v1/entries", _recorded, json=payload)


scope_option = click.option(
    "--scope", "-s", multiple=True, help="A path, glob or topic:<name> (repeatable)."
)
ref_option = click.option("--ref", "-r", type=int, multiple=True, help="An entry id (repeatable).")


@sw.command()
@click.argument("body")
@scope_option
@ref_option
def observed(body: str, scope: tuple[str, ...], ref: tuple[int, ...]) -> None:
    """Record an OBSERVED entry: something you saw (not yet established)."""
    _record("OBSERVED", body, scope, ref)


@sw.command()
@click.argument("body")
@scope_option
@ref_option
@click.option("--supersedes", type=int, multiple=True, help="Id of an older FACT this replaces.")
def fact(
    body: str, scope: tuple[str, ...], ref: tuple[int, ...], supersedes: tuple[int, ...]
) -> None:
    """Record a FACT: something verified that others can rely on."""
    _record("FACT", body, scope, ref + supersedes)


@sw.command()
@click.argument("body")
@scope_option
@click.option("--claim", "claim_id", type=int, help="Your claim this failure ends (frees it).")
@ref_option
def fail(body: str, scope: tuple[str, ...], claim_id: int | None, ref: tuple[int, ...]) -> None:
    """Record a FAIL: what you tried, why it did not work. With --claim, ends that claim."""
    _record("FAIL", body, scope, ((claim_id,) if claim_id else ()) + ref)


@sw.command()
@click.argument("scope", nargs=-1, required=True)
@click.option("--message", "-m", "body", required=True, help="What you will do in this scope.")
@click.option("--lease", type=float, help="Lease in seconds (default: the hub's, e.g. 300).")
def claim(scope: tuple[str, ...], body: str, lease: float | None) -> None:
    """Claim SCOPE (paths, globs, file.py::symbol or topic:<name>) before working on it.

    The answer lists every active claim of others that overlaps yours; their
    owners get a direct message. Renew before the lease lapses (sw renew ID);
    it ends with sw summary, sw fail --claim, sw release, or when it lapses.
    """
    _record("CLAIM", body, scope, (), lease)


@sw.command()
@click.argument("claim_id", type=int)
@click.argument("body")
@ref_option
def summary(claim_id: int, body: str, ref: tuple[int, ...]) -> None:
    """Record the PATCH_SUMMARY that completes CLAIM_ID: what changed, why, and the evidence
    (tests run, their result, the PR number)."""
    _record("PATCH_SUMMARY", body, (), (claim_id, *ref))


@sw.command()
@click.argument("entry_type", metavar="TYPE")
@click.argument("body")
@scope_option
@ref_option
def record(entry_type: str, body: str, scope: tuple[str, ...], ref: tuple[int, ...]) -> None:
    """Record an entry of any TYPE (OBSERVED, FACT, FAIL, CLAIM, PATCH_SUMMARY)."""
    _record(entry_type, body, scope, ref)


@sw.command()
@click.argument("claim_id", type=int)
@click.option("--lease", type=float, help="New lease in seconds, counted from now.")
def renew(claim_id: int, lease: float | None) -> None:
    """Extend the lease of your claim CLAIM_ID."""
    run(
        "POST",
        f"/v1/claims/{claim_id}/renew",
        lambda r: "renewed " + fmt.claim(r["claim"]),
        json={"lease_seconds": lease},
    )


@sw.command()
@click.argument("claim_id", type=int)
def release(claim_id: int) -> None:
    """Release your claim CLAIM_ID without a result (someone else may take it)."""
    run("POST", f"/v1/claims/{claim_id}/release", lambda r: "released " + fmt.claim(r["claim"]))


@sw.command()
@click.option("--all", "all_", is_flag=True, help="Recent claims of any state, not only active.")
@click.option("--mine", is_flag=True, help="Only your claims.")
@click.option("--owner", help="Only this worker's claims.")
def claims(all_: bool, mine: bool, owner: str | None) -> None:
    """List active claims: who works on what, and for how long."""
    run(
        "GET",
        "/v1/claims",
        lambda r: "\n".join(fmt.claim(c) for c in r["claims"]) or "(no active claims)",
        params={"all": all_ or None, "mine": mine or None, "owner": owner},
    )


@sw.command()
@click.argument("pattern")
@click.option("-i", "--ignore-case", is_flag=True)
@click.option("--type", "-t", "types", multiple=True, help="Only this entry type (repeatable).")
@click.option("--author", "-a", help="Only this worker's entries, e.g. w3.")
@click.option("--since", help="Only entries newer than this, e.g. 10m, 2h.")
@click.option("--after", type=int, help="Only ids greater than this.")
@click.option("--before", type=int, help="Only ids smaller than this.")
@click.option("-n", "--limit", type=int, default=20, show_default=True)
@click.option("--full", is_flag=True, help="Print whole bodies, not one line each.")
def grep(
    pattern: str,
    ignore_case: bool,
    types: tuple[str, ...],
    author: str | None,
    since: str | None,
    after: int | None,
    before: int | None,
    limit: int,
    full: bool,
) -> None:
    """Search the whole shared history (bodies and scopes) with an RE2 regular expression,
    newest first. Use '.' to match everything."""
    params = {
        "pattern": pattern,
        "ignore_case": ignore_case or None,
        "type": list(types),
        "author": author,
        "since": _duration(since),
        "after": after,
        "before": before,
        "limit": limit,
    }
    run("GET", "/v1/grep", lambda r: _entries_text(r, full), params=params)


@sw.command()
@click.argument("entry_id", type=int)
def show(entry_id: int) -> None:
    """Show one entry in full, its claim state, and the entries that refer to it."""

    def render(r: dict[str, Any]) -> str:
        lines = [fmt.entry(r["entry"], full=True)]
        if r.get("claim"):
            lines.append(fmt.claim(r["claim"]))
        lines += ["referred to by " + fmt.entry(e) for e in r.get("referrers", [])]
        return "\n".join(lines)

    run("GET", f"/v1/entries/{entry_id}", render)


@sw.command()
@click.option("-n", "--limit", type=int, default=20, show_default=True)
@click.option("--type", "-t", "types", multiple=True, help="Only this entry type (repeatable).")
@click.option("--author", "-a", help="Only this worker's entries.")
@click.option("--full", is_flag=True, help="Print whole bodies.")
def tail(limit: int, types: tuple[str, ...], author: str | None, full: bool) -> None:
    """The newest entries, newest first."""
    run(
        "GET",
        "/v1/entries",
        lambda r: _entries_text(r, full),
        params={"limit": limit, "type": list(types), "author": author},
    )


@sw.command()
@click.option("-n", "--limit", type=int, default=100, show_default=True)
def feed(limit: int) -> None:
    """Every peer entry since you last looked, oldest first, none skipped (pages of LIMIT)."""
    run("GET", "/v1/feed", lambda r: _entries_text(r), params={"limit": limit})


@sw.command()
@click.argument("body")
def say(body: str) -> None:
    """Post to the shared tasks channel (low priority: peers read it at their next iteration)."""
    run(
        "POST",
        "/v1/channel",
        lambda r: "posted " + fmt.message(r["message"]),
        json={"body": _text(body)},
    )


@sw.command()
@click.argument("worker")
@click.argument("body")
def dm(worker: str, body: str) -> None:
    """Send a direct message to WORKER (e.g. w3): high priority, shown at their next call."""
    run(
        "POST",
        "/v1/dm",
        lambda r: "sent " + fmt.message(r["message"]),
        json={"to": worker, "body": _text(body)},
    )


@sw.command()
def inbox() -> None:
    """Channel posts you have not read yet (oldest first), plus your direct messages."""

    def render(r: dict[str, Any]) -> str:
        lines = [fmt.message(m) for m in r["channel"]] or ["(no new channel posts)"]
        if r.get("more"):
            lines.append(f"({r['more']} more: run sw inbox again)")
        return "\n".join(lines)

    run("GET", "/v1/inbox", render)


@sw.command()
def whoami() -> None:
    """Your worker name and the hub you talk to."""

    def render(r: dict[str, Any]) -> str:
        line = f"you are {r['name']} (worker {r['id']})"
        if r.get("without"):
            line += f"; this run is without: {', '.join(r['without'])}"
        return line

    run("GET", "/v1/whoami", render)


def _register_extensions() -> None:
    """Commands of optional parts (pull requests, ...) register themselves here."""
    import importlib

    importlib.import_module("swarm.tools.commands_pr").register(sw)
    importlib.import_module("swarm.tools.commands_workers").register(sw)
    importlib.import_module("swarm.tools.commands_oracle").register(sw)


_register_extensions()


def main() -> None:
    sw(prog_name="sw")


if __name__ == "__main__":
    main()
