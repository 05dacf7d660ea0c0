"""The Debian importer: apt's sources turned into a private deb-src state, jq's .test format,
the reference's option parser, clear errors; and (slow) an import of jq from Debian's real
packages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from swarm.errors import InvalidInput, NotFound, Unavailable
from swarm.tasks.cli import task_group
from swarm.tasks.model import load_task
from swarm.tasks.rebuild import debian, import_debian
from swarm.tasks.rebuild.jq import parse_test_file, to_cli_test
from swarm.tasks.rebuild.jqpy import options
from swarm.tasks.units import check_independent, load_units

SOURCES = """\
Types: deb
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: https://deb.nodesource.com/node_20.x
Suites: nodistro
Components: main
Signed-By: /usr/share/keyrings/nodesource.gpg

Types: deb
Enabled: no
URIs: http://mirror.example/debian-debug
Suites: bookworm-debug
Components: main
"""


def test_deb_src_entries_mirror_the_machines_debian_sources(tmp_path: Path) -> None:
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (parts / "debian.sources").write_text(SOURCES)
    (parts / "old.list").write_text(
        "# a comment\ndeb [signed-by=/k.gpg arch=amd64] http://mirror.example/debian-security "
        "bookworm-security main contrib\n"
    )
    (parts / "ignored.list.disabled").write_text("deb http://elsewhere/debian sid main\n")
    text = debian.debian_sources([parts])
    assert text == (
        "Types: deb deb-src\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb deb-src\nURIs: http://mirror.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main contrib\nSigned-By: /k.gpg\n"
    )
    with pytest.raises(Unavailable, match="no Debian archive among apt's sources"):
        debian.debian_sources([tmp_path / "nothing"])


def test_an_unreachable_archive_is_no_deb_src_reachable(tmp_path: Path) -> None:
    apt = debian.Apt(tmp_path / "apt")
    closed = "Types: deb deb-src\nURIs: http://127.0.0.1:9/debian\nSuites: bookworm\n"
    with pytest.raises(Unavailable, match=r"^no deb-src reachable: apt-get update with "):
        apt.update(sources=closed + "Components: main\nTrusted: yes\n")


@pytest.mark.parametrize("name", ["JQ", "j", "jq;rm -rf", "../jq", ""])
def test_package_names_are_checked(name: str) -> None:
    with pytest.raises(InvalidInput, match="is not a Debian package name"):
        debian.check_package_name(name)


def test_an_unknown_test_format_is_refused_before_any_download(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"unknown test format: .*cmark.* \(it can for: jq\)"):
        import_debian("debian:cmark", tmp_path / "cmark")
    assert not (tmp_path / "cmark").exists()
    result = CliRunner().invoke(task_group, ["import", "cpan:jq", str(tmp_path / "x")])
    assert result.exit_code == 1 and "unknown source 'cpan:jq'" in result.output


JQ_TESTS = """\
# Tests are groups of three lines: program, input, expected output

true
null
true

-1
null
-1

.[]
[1,2]
1
2
# a comment ends the outputs, as jq_test.c's skipline does
%%FAIL
{(0):1}
jq: error: Cannot use number (0) as object key at <top-level>, line 1:

%%FAIL IGNORE MSG
. as [] | null
jq: error: syntax error, unexpected ']'

import "a" as foo; foo::a
null
"a"

empty
null
"""


def test_jq_test_groups_become_command_lines() -> None:
    groups = list(parse_test_file(JQ_TESTS, "tests/jq.test"))
    assert [(g.line, g.program) for g in groups] == [
        (3, "true"), (7, "-1"), (11, ".[]"), (17, "{(0):1}"), (21, ". as [] | null"),
        (24, 'import "a" as foo; foo::a'), (28, "empty"),
    ]  # fmt: skip
    modules = {"a.jq": 'def a: "a";'}
    tests = [to_cli_test(g, modules) for g in groups]
    assert tests[0] == {
        "id": "jq.test:3", "source": "tests/jq.test:3", "args": ["-c", "true"],
        "stdin": "null\n", "stdout": "true\n", "match": "json", "exit_code": 0,
    }  # fmt: skip
    assert tests[1]["args"] == ["-c", " -1"]  # jq 1.6 would take -1 for an option
    assert tests[2]["stdout"] == "1\n2\n"
    assert tests[3]["exit_code"] == 3 and tests[3]["stderr_contains"].startswith(
        "jq: error: Cannot use number (0)"
    )
    assert tests[4]["exit_code"] == 3 and "stderr_contains" not in tests[4]
    assert tests[5]["args"][:2] == ["-L", "modules"]
    assert tests[5]["files"] == {"modules/a.jq": 'def a: "a";'}
    assert tests[6]["stdout"] == "" and tests[6]["stdin"] == "null\n"


def test_the_reference_parses_options_as_jq_does() -> None:
    parsed = options.parse(["-nr", "-L", "lib", "-Lmore", "--arg", "x", "1", ".", "in.json"])
    assert parsed.null_input and parsed.raw_output and parsed.program == "."
    assert parsed.library_paths == ["lib", "more"] and parsed.files == ["in.json"]
    assert parsed.named == {"x": ("arg", "1")}
    assert options.parse(["--tab", "-c", "."]).dumpopts == 0  # the last one wins
    assert options.parse(["-c", "--indent", "3", "."]).dumpopts == options.indent_flags(3)
    assert options.parse([".", "--args", "a", "b"]).positional == [("string", "a"), ("string", "b")]
    with pytest.raises(options.Exit) as stop:
        options.parse(["-cz", "."])
    assert stop.value.code == 2 and "Unknown option -cz" in stop.value.message
    with pytest.raises(options.Exit) as stop:
        options.parse(["--indent", "9", "."])
    assert "between -1 and 7" in stop.value.message


# -- Debian's real packages -----------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.xdist_group("debian")  # one apt state: see test_rebuild_jq.py
@pytest.mark.timeout(1800)
def test_import_jq_from_debians_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its own apt state and downloads: test_rebuild_jq.py's fixture fills the session's at the
    # same time in another xdist process.
    monkeypatch.setenv("SWARM_CACHE_DIR", str(tmp_path / "cache"))
    said: list[str] = []
    dest = import_debian("debian:jq", tmp_path / "jq", say=said.append)
    task = load_task(dest)
    assert task.is_prepared and task.name == "jq" and task.prepare == "debian"
    provenance = json.loads((dest / "import.json").read_text())
    assert provenance["package"] == "jq" and provenance["binaries"][0].startswith("jq 1.6-")
    assert any(b.startswith("libjq1 ") for b in provenance["binaries"])
    converted, kept = provenance["tests"]["converted"], provenance["tests"]["kept"]
    dropped = provenance["tests"]["dropped"]
    assert converted == kept + len(dropped) and kept >= 350, provenance["tests"]
    # jq 1.6 itself fails the dropped ones: an error after the expected outputs (exit 5).
    assert dropped and all("exit code 5, expected 0" in d["why"] for d in dropped)
    lines = (task.hidden_dir / "tests.jsonl").read_text().splitlines()
    assert len(lines) == kept and (task.hidden_dir / "cli_tests.py").is_file()
    sources = {json.loads(line)["source"].split(":")[0] for line in lines}
    assert sources == {"tests/jq.test", "tests/onig.test", "tests/base64.test"}
    # The start is the README and the manual; the goal names the oracle and the tests.
    start = sorted(str(p.relative_to(task.start_dir)) for p in task.start_dir.rglob("*"))
    assert start == ["README.md", "docs", "docs/manual.md"]
    manual = (task.start_dir / "docs" / "manual.md").read_text()
    assert "## Invoking jq" in manual and "* `--slurp`/`-s`:" in manual
    assert "### Array Index: `.[2]`" in manual
    goal = task.goal_text()
    assert "sw oracle" in goal and f"{kept} cases" in goal and "python -m jqpy" in goal
    # The oracle is Debian's jq, runnable from the task; the reference is six new files.
    assert task.oracle_path is not None
    units = load_units(task)
    assert [u.id for u in units] == ["libjq", "libonig", "native", "options", "cli", "package"]
    check_independent(units, task.start_dir)
    assert any(line.startswith("tests: ") for line in said)
    # A second import over it needs --force; with it, everything comes from the cache.
    with pytest.raises(Exception, match="already holds a task; use --force"):
        import_debian("debian:jq", dest)


@pytest.mark.slow
@pytest.mark.xdist_group("debian")  # one apt state: see test_rebuild_jq.py
def test_debian_lookups_name_what_is_missing() -> None:
    apt = debian.private_apt()
    with pytest.raises(NotFound, match="Debian has no binary package 'no-such-package-swarm'"):
        debian.binary_records(apt, "no-such-package-swarm")
    with pytest.raises(NotFound, match="no source package builds 'no-such-package-swarm'"):
        debian.source_records(apt, "no-such-package-swarm")
