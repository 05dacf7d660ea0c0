"""jq's own test suite and manual, turned into a program-rebuild task's tests and docs.

jq's `tests/*.test` files (read by `jq --run-tests`, src/jq_test.c) hold groups of lines: a
program, an input, then the expected outputs up to a blank or comment line, each compared as
a JSON value. A group after a `%%FAIL` line is a program that must not compile (the next line
is the first line of its error message); after `%%FAIL IGNORE MSG` the message is not checked.
Each group becomes one command-line test (swarm.evaluation.cli_tests): `jq -c PROGRAM` with
the input on stdin, outputs compared as JSON values, exit status 0; a program that must not
compile exits 3 with its message on stderr. Programs that import modules get jq's own
`tests/modules` folder as files and `-L modules`, as `--run-tests -L tests/modules` has them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarm.errors import InvalidInput

TEST_FILES = ("tests/jq.test", "tests/onig.test", "tests/base64.test")
MODULES_DIR = "tests/modules"
COMPILE_ERROR_EXIT = 3
# A program that loads modules from the library path: it needs jq's test modules and -L.
_USES_MODULES = re.compile(r'(?:^|[;|(\s])(?:import|include)\s+"|\bmodulemeta\b')


@dataclass(frozen=True)
class JqTest:
    """One group of a .test file."""

    file: str
    line: int  # of the program
    program: str
    input: str | None  # None for a program that must not compile
    outputs: tuple[str, ...] = ()
    error: str | None = None  # the first line of the compile error, when it is checked


def _skip(line: str) -> bool:
    """jq_test.c's skipline: blank, or a comment after spaces and tabs."""
    stripped = line.lstrip(" \t")
    return stripped == "" or stripped.startswith("#")


def parse_test_file(text: str, name: str) -> Iterator[JqTest]:
    """The groups of a jq .test file, as `jq --run-tests` reads them."""
    # fgets' lines: split at "\n" only (str.splitlines also splits at \x1c, \u2028, …)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    at = 0
    must_fail = check_message = False
    while at < len(lines):
        line, number = lines[at], at + 1
        at += 1
        if _skip(line):
            continue
        if line in ("%%FAIL", "%%FAIL IGNORE MSG"):
            must_fail, check_message = True, line == "%%FAIL"
            continue
        if must_fail:
            message = lines[at] if at < len(lines) else ""
            at += 1
            yield JqTest(name, number, line, None, error=message if check_message else "")
            must_fail = check_message = False
            continue
        if at >= len(lines):
            break  # a program without its input: jq counts it malformed
        given = lines[at]
        at += 1
        outputs = []
        while at < len(lines) and not _skip(lines[at]):
            outputs.append(lines[at])
            at += 1
        yield JqTest(name, number, line, given, tuple(outputs))


def program_arg(program: str) -> str:
    """jq 1.6 has no `--` before its filter: a program starting with `-` gets a leading space."""
    return " " + program if program.startswith("-") else program


def to_cli_test(test: JqTest, modules: Mapping[str, str]) -> dict[str, Any]:
    """The command-line test (swarm.evaluation.cli_tests' format) for one group."""
    args = ["-c", program_arg(test.program)]
    files: dict[str, str] = {}
    if _USES_MODULES.search(test.program):
        args = ["-L", "modules", *args]
        files = {f"modules/{name}": text for name, text in sorted(modules.items())}
    stem = Path(test.file).name
    cli: dict[str, Any] = {"id": f"{stem}:{test.line}", "source": f"{test.file}:{test.line}"}
    cli["args"] = args
    if test.input is None:
        cli.update(stdin="", stdout="", exit_code=COMPILE_ERROR_EXIT)
        if test.error:
            cli["stderr_contains"] = test.error
    else:
        outputs = "".join(f"{o}\n" for o in test.outputs)
        cli.update(stdin=test.input + "\n", stdout=outputs, match="json", exit_code=0)
    if files:
        cli["files"] = files
    return cli


def read_modules(source: Path) -> dict[str, str]:
    """jq's test modules (text files under tests/modules), by path below that folder."""
    base = source / MODULES_DIR
    if not base.is_dir():
        return {}
    return {
        str(p.relative_to(base)): p.read_text(encoding="utf-8")
        for p in sorted(base.rglob("*"))
        if p.is_file()
    }


def convert_suite(source: Path) -> list[dict[str, Any]]:
    """Every group of jq's .test files in an unpacked source tree, as command-line tests."""
    found = [source / name for name in TEST_FILES if (source / name).is_file()]
    if not found:
        raise InvalidInput(
            f"{source} has none of jq's test files ({', '.join(TEST_FILES)}): not jq's source"
        )
    modules = read_modules(source)
    tests = []
    for path in found:
        name = str(path.relative_to(source))
        for group in parse_test_file(path.read_text(encoding="utf-8"), name):
            tests.append(to_cli_test(group, modules))
    return tests


# -- the manual ----------------------------------------------------------------------------
def manual_file(source: Path, version: str) -> Path:
    """The manual of this release (docs/content/3.manual/v<version>/manual.yml), else the
    development manual the release shipped."""
    base = source / "docs" / "content" / "3.manual"
    for candidate in (base / f"v{version}" / "manual.yml", base / "manual.yml"):
        if candidate.is_file():
            return candidate
    raise InvalidInput(f"{source} has no jq manual (docs/content/3.manual/…/manual.yml)")


def _example(example: Mapping[str, Any]) -> str:
    outputs = example.get("output") or []
    lines = [f"jq '{example.get('program', '')}'", f"   input: {example.get('input', '')}"]
    lines += [f"  output: {o}" for o in outputs] or ["  output: (nothing)"]
    return "```\n" + "\n".join(lines) + "\n```\n"


def render_manual(data: Mapping[str, Any], version: str) -> str:
    """jq's manual (its manual.yml, as the jq website renders it) as one Markdown page."""
    parts = [f"# jq {version} manual\n", str(data.get("body", "")).strip() + "\n"]
    for section in data.get("sections") or []:
        parts.append(f"## {section.get('title', '')}\n")
        if section.get("body"):
            parts.append(str(section["body"]).strip() + "\n")
        for entry in section.get("entries") or []:
            parts.append(f"### {entry.get('title', '')}\n")
            if entry.get("body"):
                parts.append(str(entry["body"]).strip() + "\n")
            examples = entry.get("examples") or []
            if examples:
                parts.append("Examples:\n")
                parts += [_example(e) for e in examples]
    return "\n".join(parts)


def section_titles(data: Mapping[str, Any]) -> list[str]:
    return [str(s.get("title", "")) for s in data.get("sections") or []]


def load_manual(source: Path, version: str) -> dict[str, Any]:
    """The parsed manual.yml (PyYAML, the `debian` extra)."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - the extra is part of dev
        raise InvalidInput(
            "reading jq's manual needs PyYAML: pip install 'swarm[debian]'"
        ) from None
    path = manual_file(source, version)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "sections" not in data:
        raise InvalidInput(f"{path} is not jq's manual (no `sections`)")
    return data
