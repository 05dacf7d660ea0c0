"""Preparer for the inflection task: PyPI's inflection 0.5.1 with every public function stubbed."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swarm.tasks.fetch import pypi_sdist, read_sdist_member
from swarm.tasks.prepare import Say, write_files
from swarm.tasks.units import Edit, Unit, check_independent, dump_units

PACKAGE, VERSION = "inflection", "0.5.1"
MODULE = "inflection/__init__.py"

README = """# inflection

A port of Ruby on Rails' inflector to Python: pluralize, singularize, camelize,
underscore and friends. Every public function is documented by its docstring in
`inflection/__init__.py`; the bodies are still to be written.

Run the tests you write with `python -m pytest`.
"""

PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "inflection"
version = "0.5.1"
requires-python = ">=3.8"

[tool.setuptools]
packages = ["inflection"]
"""

GOAL_HEAD = """# Goal: finish the `inflection` library

The repository holds `inflection`, a Python port of Ruby on Rails' inflector. The
module-level rule tables (`PLURALS`, `SINGULARS`, `UNCOUNTABLES`) and the helper
`_irregular` are complete, but the body of every public function raises
`NotImplementedError`. Implement them so they behave exactly as their docstrings
say (the examples in the docstrings are exact). A hidden test suite checks the
public API below; it imports `inflection` from the repository root.

## Public API
"""


def stub_functions(source: str, path: str) -> tuple[str, list[Unit], list[str]]:
    """Replace each public top-level function body by `raise NotImplementedError`.

    Returns the stubbed source, one unit per function (stub → original body) and the API
    description (signature + docstring) of each function, in file order.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    functions = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    ]
    units: list[Unit] = []
    api: list[str] = []
    # Replace from the bottom so earlier line numbers stay valid.
    for node in reversed(functions):
        body = node.body
        has_doc = ast.get_docstring(node, clean=False) is not None
        first = body[1] if has_doc and len(body) > 1 else body[0]
        if has_doc and len(body) == 1:
            continue  # nothing but a docstring: nothing to build
        start, end = first.lineno - 1, (body[-1].end_lineno or body[-1].lineno)
        indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
        stub = f'{indent}raise NotImplementedError("{node.name}")\n'
        original = "".join(lines[start:end])
        lines[start:end] = [stub]
        units.append(
            Unit(
                id=node.name,
                title=f"implement {node.name}()",
                # The function, not the file: every unit is in this one file, and a file scope
                # would make each claim overlap every other.
                scope=(f"{path}::{node.name}",),
                edits=(Edit(path, stub, original),),
            )
        )
        signature = "".join(lines[node.lineno - 1 : first.lineno - 1]).rstrip()
        api.append(f"### `{node.name}`\n\n```python\n{signature}\n```\n")
    units.reverse()
    api.reverse()
    return "".join(lines), units, api


def prepare_inflection(
    root: Path, options: Mapping[str, Any], *, force: bool, say: Say
) -> list[str]:
    """Download inflection's sdist and write start/, hidden/, solution/ and goal.md."""
    version = str(options.get("version", VERSION))
    say(f"downloading {PACKAGE}=={version} (sdist) from PyPI, or reusing the cached copy")
    sdist = pypi_sdist(PACKAGE, version, force=force)
    say(f"using {sdist}")
    source = read_sdist_member(sdist, MODULE).decode("utf-8")
    tests = read_sdist_member(sdist, "test_inflection.py")
    stubbed, units, api = stub_functions(source, MODULE)
    write_files(
        root / "start",
        {
            MODULE: stubbed,
            "inflection/py.typed": "",
            "README.md": README,
            "pyproject.toml": PYPROJECT,
        },
    )
    # A pytest.ini next to the hidden tests makes it pytest's rootdir, so no outer config applies.
    write_files(root / "hidden", {"test_inflection.py": tests, "pytest.ini": "[pytest]\n"})
    check_independent(units, root / "start")
    write_files(root / "solution", {"units.json": dump_units(units)})
    (root / "goal.md").write_text(GOAL_HEAD + "\n" + "\n".join(api), encoding="utf-8")
    say(f"wrote start/ ({len(units)} stubbed functions), hidden/, solution/units.json, goal.md")
    return ["start", "hidden", "solution", "goal.md"]
