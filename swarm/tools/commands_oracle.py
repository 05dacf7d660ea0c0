"""`sw oracle ARGS... [< input]`: run the task's original program through the hub."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from swarm.tools import format as fmt
from swarm.tools.client import HubError
from swarm.tools.sw import _client

STOPPED = 124  # the program ran into a limit (time, output), as timeout(1) says it
REFUSED = 125  # sw itself failed: the hub refused, or could not be reached

HELP = """Run the task's original program (the oracle) with ARGS and print what it printed.

\b
The program runs on the hub, outside your sandbox: you can run it but not read it.
Standard input is sent along unless it is a terminal (or --no-stdin). It starts
in an empty, read-only folder; --file PATH puts a copy of a local file there
under its own name. Its standard output goes to yours unchanged, its standard
error to yours, and sw exits with its exit status: compare it with your own.

\b
  sw oracle -c '.a' <<< '{"a": 1}'
  diff <(sw oracle -c . < in.json) <(python -m jqpy -c . < in.json)
  sw oracle --file data.json -- --slurpfile d data.json -n '$d'
  sw oracle -- --help      # ARGS that look like sw's own options go after --

\b
Exit status: the program's; 128+N when a signal N killed it; 124 when it ran
past the time limit or flooded its output and was stopped; 125 when the hub
refused the call (the message says why: limits, rate, no oracle in this run).
What your peers recorded since your last call follows on standard error.
"""


def _fail(exc: HubError) -> NoReturn:
    click.echo(f"sw: error: {fmt.peer_text(exc.message)}", err=True)
    sys.exit(REFUSED)


def _decoded(result: dict[str, Any], name: str) -> bytes:
    if f"{name}_base64" in result:
        return base64.b64decode(result[f"{name}_base64"])
    return str(result.get(name, "")).encode("utf-8", errors="surrogateescape")


def register(group: click.Group) -> None:
    @group.command(
        help=HELP,
        context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    )
    @click.option(
        "--file",
        "files",
        multiple=True,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="A local file to put in the program's working folder (repeatable).",
    )
    @click.option("--timeout", type=float, help="Seconds before it is stopped (at most the hub's).")
    @click.option("--no-stdin", is_flag=True, help="Send no standard input.")
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def oracle(
        args: tuple[str, ...], files: tuple[Path, ...], timeout: float | None, no_stdin: bool
    ) -> None:
        stdin = b""
        if not no_stdin and not sys.stdin.isatty():
            stdin = sys.stdin.buffer.read()
        payload: dict[str, Any] = {"args": list(args), "timeout": timeout}
        try:
            payload["stdin"] = stdin.decode("utf-8")
            if "\x00" in payload["stdin"]:
                raise UnicodeDecodeError("utf-8", stdin, 0, 1, "NUL")
        except UnicodeDecodeError:  # bytes that are not text go as they are
            payload.pop("stdin", None)
            payload["stdin_base64"] = base64.b64encode(stdin).decode("ascii")
        payload["files"] = {
            path.name: base64.b64encode(path.read_bytes()).decode("ascii") for path in files
        }
        try:
            with _client() as client:
                data = client.call("POST", "/v1/oracle", json=payload)
        except HubError as exc:
            _fail(exc)
        result = data["result"]
        sys.stdout.buffer.write(_decoded(result, "stdout"))
        sys.stdout.flush()
        sys.stderr.buffer.write(_decoded(result, "stderr"))
        notes = []
        if result.get("timed_out"):
            notes.append(
                f"sw: {result['program']} ran past {result['limits']['seconds']:g}s and was stopped"
            )
        if result.get("truncated"):
            notes.append(
                f"sw: {result['program']} printed over {result['limits']['max_output_bytes']} "
                "bytes on one stream and was stopped; what it printed is cut there"
            )
        block = fmt.delivery(data.get("delivery"))
        text = "\n".join(part for part in (*notes, block) if part)
        if text:
            sys.stderr.flush()
            click.echo(text, err=True)
        code = result.get("exit_code")
        if code is None:
            sys.exit(STOPPED)
        sys.exit(128 - code if code < 0 else code)
