"""Run command-line behavioural tests against an implementation; scores each test on its own.

Standard library only: a preparer copies this file beside the hidden tests, so the eval command
needs nothing from swarm. Usage:

    python cli_tests.py TESTS.jsonl [--timeout S] [--jobs N] [-k TEXT] -- COMMAND [ARG ...]

TESTS.jsonl holds one test per line (blank lines and lines starting with # are skipped):

    {"id": "jq.test:105", "args": ["-c", ".a"], "stdin": "{\\"a\\": 1}\\n",
     "stdout": "1\\n", "exit_code": 0}

- `id` (required): unique, no whitespace; printed as `<file>::<id>`.
- `args` (required): the arguments given to COMMAND.
- `stdin` (default ""): the text on the command's standard input.
- `stdout` (default: not checked): the expected standard output, compared as `match` says:
  `"exact"` (the default; byte for byte) or `"json"` (both are streams of JSON values, equal
  as values: numbers as doubles, object keys in any order, whitespace between values ignored).
- `exit_code` (default 0; null: not checked), `stderr_contains` (default: not checked).
- `files` (default none): {relative path: text} written into the test's working folder.
- `timeout` (default --timeout): seconds before the command is killed (a failed test).

Every test runs in a fresh empty working folder with its own process group; a command word
of COMMAND starting with ./ or ../ is made absolute first, from the folder the runner started
in. A command that crashes, hangs, floods its output or cannot start fails its test only. The
output is one `PASSED <file>::<id>` or `FAILED <file>::<id> - <why>` line per test, then the
summary `N passed, M failed in S s` (exit status 0 when every test passed, 1 otherwise, 2
when the tests file itself is unusable).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MATCHES = ("exact", "json")
MAX_OUTPUT_BYTES = 16 * 1024 * 1024  # a file (stdout, stderr, a written file) past this fails
KNOWN_FIELDS = {
    "id", "args", "stdin", "stdout", "exit_code", "stderr_contains", "match", "files",
    "timeout", "source", "note",
}  # fmt: skip


class BadTests(Exception):
    """The tests file cannot be used; the message names the line and the field."""


@dataclass(frozen=True)
class CliTest:
    id: str
    args: list[str]
    stdin: str = ""
    stdout: str | None = None
    exit_code: int | None = 0
    stderr_contains: str | None = None
    match: str = "exact"
    files: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None


@dataclass(frozen=True)
class Outcome:
    test: CliTest
    passed: bool
    why: str = ""


def _field(raw: dict[str, Any], name: str, kinds: tuple[type, ...], where: str) -> Any:
    value = raw[name]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise BadTests(f"{where}: field {name!r} must be {names}, got {value!r:.60}")
    return value


def parse_test(raw: Any, where: str) -> CliTest:
    """One test from its JSON object; BadTests says what is wrong with it."""
    if not isinstance(raw, dict):
        raise BadTests(f"{where}: a test must be a JSON object")
    unknown = sorted(set(raw) - KNOWN_FIELDS)
    if unknown:
        raise BadTests(f"{where}: unknown field {unknown[0]!r} (known: {sorted(KNOWN_FIELDS)})")
    for name in ("id", "args"):
        if name not in raw:
            raise BadTests(f"{where}: field {name!r} is required")
    test_id = _field(raw, "id", (str,), where)
    if not test_id or any(c.isspace() for c in test_id):
        raise BadTests(f"{where}: field 'id' must be non-empty and hold no whitespace")
    args = _field(raw, "args", (list,), where)
    if not all(isinstance(a, str) and "\x00" not in a for a in args):
        raise BadTests(f"{where}: field 'args' must be a list of strings without NUL")
    values: dict[str, Any] = {"id": test_id, "args": list(args)}
    for name, kinds in (
        ("stdin", (str,)),
        ("stdout", (str, type(None))),
        ("exit_code", (int, type(None))),
        ("stderr_contains", (str, type(None))),
        ("match", (str,)),
        ("files", (dict,)),
        ("timeout", (int, float)),
    ):
        if name in raw:
            values[name] = _field(raw, name, kinds, where)
    if values.get("match", "exact") not in MATCHES:
        raise BadTests(f"{where}: field 'match' must be one of {MATCHES}")
    timeout = values.get("timeout")
    if timeout is not None and not (0 < timeout < math.inf):
        raise BadTests(f"{where}: field 'timeout' must be a positive number of seconds")
    for name, text in values.get("files", {}).items():
        parts = Path(name).parts
        if not isinstance(text, str) or not parts or Path(name).is_absolute() or ".." in parts:
            raise BadTests(f"{where}: files[{name!r}] must be text at a relative path inside")
    return CliTest(**values)


def load_tests(path: Path) -> list[CliTest]:
    tests: list[CliTest] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            where = f"{path.name}:{number}"
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BadTests(f"{where}: not JSON ({exc})") from None
            test = parse_test(raw, where)
            if test.id in seen:
                raise BadTests(f"{where}: id {test.id!r} is used twice")
            seen.add(test.id)
            tests.append(test)
    return tests


def _number(text: str) -> float:
    return float(text)


def json_stream(text: str) -> list[Any]:
    """The JSON values in `text`, separated by whitespace (ValueError if it is not that)."""
    decoder = json.JSONDecoder(parse_int=_number, parse_constant=_number)
    values: list[Any] = []
    at = 0
    while True:
        while at < len(text) and text[at] in " \t\r\n":
            at += 1
        if at == len(text):
            return values
        value, at = decoder.raw_decode(text, at)
        values.append(value)


def _short(text: str, width: int = 160) -> str:
    flat = json.dumps(text, ensure_ascii=False)
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def compare(test: CliTest, code: int, stdout: str, stderr: str) -> str:
    """Why the run does not meet the test ("" when it does)."""
    if test.exit_code is not None and code != test.exit_code:
        detail = f"; stderr {_short(stderr.strip())}" if stderr.strip() else ""
        return f"exit code {code}, expected {test.exit_code}{detail}"
    if test.stdout is not None:
        if test.match == "json":
            try:
                expected = json_stream(test.stdout)
            except ValueError:
                return "the test's own expected stdout is not a JSON stream"
            try:
                got = json_stream(stdout)
            except ValueError:
                return f"stdout is not a JSON stream: {_short(stdout)}"
            if got != expected:
                return f"stdout {_short(stdout)}, expected {_short(test.stdout)}"
        elif stdout != test.stdout:
            return f"stdout {_short(stdout)}, expected {_short(test.stdout)}"
    if test.stderr_contains is not None and test.stderr_contains not in stderr:
        return f"stderr {_short(stderr)} does not contain {_short(test.stderr_contains)}"
    return ""


def _limits() -> None:
    # In the child: an implementation that floods its output stops at the file-size limit.
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_OUTPUT_BYTES, MAX_OUTPUT_BYTES))
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_test(command: list[str], test: CliTest, timeout: float) -> Outcome:
    """Run one test in a fresh folder; never raises for anything the command does."""
    limit = test.timeout or timeout
    with tempfile.TemporaryDirectory(prefix="cli-test-") as scratch:
        base = Path(scratch)
        work, io = base / "work", base / "io"
        work.mkdir()
        io.mkdir()
        for name, text in test.files.items():
            target = work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        (io / "stdin").write_bytes(test.stdin.encode("utf-8"))
        with (
            open(io / "stdin", "rb") as stdin,
            open(io / "stdout", "wb") as out,
            open(io / "stderr", "wb") as err,
        ):
            try:
                process = subprocess.Popen(
                    [*command, *test.args], cwd=work, stdin=stdin, stdout=out, stderr=err,
                    start_new_session=True, preexec_fn=_limits,
                )  # fmt: skip
            except OSError as exc:
                return Outcome(test, False, f"could not run {command[0]}: {exc.strerror or exc}")
            try:
                code = process.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                # Whatever it left running (children, servers) ends with the test.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if code is None:
            return Outcome(test, False, f"timed out after {limit:g}s")
        stdout = (io / "stdout").read_bytes().decode("utf-8", errors="replace")
        stderr = (io / "stderr").read_bytes().decode("utf-8", errors="replace")
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return Outcome(test, False, f"killed by signal {name}; stderr {_short(stderr.strip())}")
    why = compare(test, code, stdout, stderr)
    return Outcome(test, not why, why)


def resolve_command(command: list[str], cwd: Path) -> list[str]:
    """Words starting with ./ or ../ made absolute: each test runs in a folder of its own."""
    return [
        str((cwd / word).resolve()) if word.startswith(("./", "../")) else word for word in command
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("tests", type=Path)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per test")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("-k", dest="only", help="only the tests whose id contains this")
    given = sys.argv[1:] if argv is None else argv
    # Everything after the first `--` is the command (argparse's REMAINDER would also take
    # the options given after the tests file).
    split = given.index("--") if "--" in given else len(given)
    args = parser.parse_args(given[:split])
    command = given[split + 1 :]
    if not command:
        parser.error("give the implementation's command after `--`, e.g. -- python -m jqpy")
    try:
        tests = load_tests(args.tests)
    except (OSError, BadTests) as exc:
        print(f"cli_tests: {exc}", file=sys.stderr)
        return 2
    if args.only:
        tests = [t for t in tests if args.only in t.id]
    command = resolve_command(command, Path.cwd())
    if shutil.which(command[0]) is None:
        print(f"cli_tests: {command[0]} is not an executable here; every test fails")
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        outcomes = list(pool.map(lambda t: run_test(command, t, args.timeout), tests))
    name = args.tests.name
    for outcome in outcomes:
        if outcome.passed:
            print(f"PASSED {name}::{outcome.test.id}")
        else:
            print(f"FAILED {name}::{outcome.test.id} - {' '.join(outcome.why.split())}")
    passed = sum(o.passed for o in outcomes)
    elapsed = time.monotonic() - started
    print(f"{passed} passed, {len(outcomes) - passed} failed in {elapsed:.2f}s")
    return 0 if passed == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
