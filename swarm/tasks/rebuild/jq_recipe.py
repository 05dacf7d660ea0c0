"""The jq recipe: jq's tests/*.test as hidden tests, its manual.yml as the docs, `python -m
jqpy` as the rebuild, and a reference that drives jq's own libjq through ctypes.

The reference (swarm/tasks/rebuild/jqpy) is honest about what it is: jq's C engine, shipped
as base64 text inside the solution units (never in the start, never shown to agents), behind
a Python port of jq's main.c. It lets a simulated run reach every hidden test and so checks
the task end to end; it says nothing about how well a model can rebuild jq.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swarm.errors import Unavailable
from swarm.tasks.rebuild import jq
from swarm.tasks.rebuild.recipes import Manual
from swarm.tasks.units import Edit, Unit

REFERENCE = Path(__file__).resolve().parent / "jqpy"
# (unit id, title, files of the package it writes: a library's .b64 or a source file)
UNITS = (
    ("libjq", "jq's C library (libjq.so.1 from Debian's libjq1) as base64", ("libjq.so.1.b64",)),
    ("libonig", "oniguruma (libonig.so.5, which libjq links) as base64", ("libonig.so.5.b64",)),
    ("native", "load libjq from memory through ctypes and type its API", ("native.py",)),
    ("options", "parse jq's command-line options as its main.c does", ("options.py",)),
    ("cli", "run the program on every input and print its results (main.c)", ("cli.py",)),
    ("package", "the jqpy package and `python -m jqpy`", ("__init__.py", "__main__.py")),
)


class JqRecipe:
    package = "jq"
    program = "jq"
    language = "Python (standard library only)"
    implementation = "python -m jqpy"
    example = "-c 'map(. * 2)' <<< '[1, 2]'"
    has_reference = True

    def tests(self, source: Path) -> list[dict[str, Any]]:
        return jq.convert_suite(source)

    def describe_tests(self, count: int) -> str:
        return (
            f"The hidden tests are jq's own test suite: {count} cases from its tests/jq.test, "
            "onig.test and base64.test. Each runs `python -m jqpy -c PROGRAM` with one JSON "
            "value on standard input and compares the outputs as JSON values (numbers as "
            "doubles, object keys in any order) and the exit status, 0. A program that must "
            "not compile exits 3 with jq's message on standard error. Programs that import "
            "modules run with `-L modules` and jq's test modules in their working folder."
        )

    def manual(self, source: Path, upstream: str) -> Manual:
        data = jq.load_manual(source, upstream)
        return Manual(
            f"jq {upstream} manual",
            jq.render_manual(data, upstream),
            tuple(jq.section_titles(data)),
        )

    def reference(self, unpacked: Path, say: Callable[[str], None]) -> list[Unit]:
        libraries = {name: _library(unpacked, name) for name in ("libjq.so.1", "libonig.so.5")}
        units = []
        for unit_id, title, files in UNITS:
            edits = []
            for name in files:
                if name.endswith(".b64"):
                    data = libraries[name.removesuffix(".b64")]
                    content = base64.encodebytes(data).decode("ascii")
                else:
                    content = (REFERENCE / name).read_text(encoding="utf-8")
                edits.append(Edit(f"jqpy/{name}", "", content))
            units.append(Unit(unit_id, title, tuple(e.path for e in edits), tuple(edits)))
        say(f"reference: {len(units)} units (libjq through ctypes; see docs/tasks.md)")
        return units


def _library(unpacked: Path, soname: str) -> bytes:
    """The shared library `soname` from the unpacked packages (its symlink followed)."""
    found = sorted(unpacked.glob(f"usr/lib/*/{soname}")) + sorted(unpacked.glob(f"lib/*/{soname}"))
    if not found:
        raise Unavailable(
            f"{soname} is not in the unpacked packages under {unpacked}: the reference needs "
            "jq's libraries (libjq1, libonig5)"
        )
    return found[0].resolve().read_bytes()


RECIPE = JqRecipe()
