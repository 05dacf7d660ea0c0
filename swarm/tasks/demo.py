"""Tasks the project writes itself: the `textkit` demo and N-unit scale tasks (no download)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swarm.errors import InvalidInput
from swarm.tasks.demo_textkit import FUNCTIONS
from swarm.tasks.model import TASK_FILE, Task, load_task
from swarm.tasks.prepare import Say, write_files
from swarm.tasks.units import Edit, Unit, dump_units

PYTEST_EVAL = "python -m pytest -q -p no:cacheprovider {hidden}"
PARTS = ["start", "hidden", "solution", "goal.md"]
MAX_SCALE_UNITS = 100_000

TASK_TOML = """name = "{name}"
goal = "goal.md"
start = "start"
hidden_tests = "hidden"
eval_command = "{command}"
eval_timeout = {timeout}
budget = "{budget}"
solution = "solution/units.json"
"""

DEMO_GOAL = """# Goal: the `textkit` library

Build `textkit`, a small Python package of independent text utilities. Each function
lives in its own module `textkit/<name>.py` and is re-exported by `textkit/__init__.py`
(already done). Every body currently raises `NotImplementedError`. Implement each one
exactly as specified below; a hidden test suite checks them through `import textkit`.

"""


def _stub(indent: str, name: str) -> str:
    return f'{indent}raise NotImplementedError("{name}")\n'


def _write_demo_parts(root: Path) -> list[str]:
    modules: dict[str, str | bytes] = {}
    units: list[Unit] = []
    goal = [DEMO_GOAL]
    for fn in FUNCTIONS:
        path = f"textkit/{fn.name}.py"
        doc = "\n".join(textwrap.wrap(fn.spec, 88, subsequent_indent="    "))
        header = f'"""textkit.{fn.name}."""\n\n' + (fn.imports + "\n\n" if fn.imports else "\n")
        modules[path] = f'{header}def {fn.name}{fn.signature}:\n    """{doc}"""\n' + _stub(
            "    ", fn.name
        )
        edit = Edit(path, _stub("    ", fn.name), fn.body)
        units.append(Unit(fn.name, f"implement textkit.{fn.name}", (path,), (edit,)))
        goal.append(f"## `textkit.{fn.name}{fn.signature}`\n\n{fn.spec}\n")
    names = [fn.name for fn in FUNCTIONS]
    init = '"""textkit: small independent text utilities."""\n\n'
    init += "".join(f"from textkit.{n} import {n}\n" for n in names)
    init += "\n__all__ = [" + ", ".join(f'"{n}"' for n in names) + "]\n"
    modules["textkit/__init__.py"] = init
    modules["README.md"] = "# textkit\n\nSmall text utilities. Test with `python -m pytest`.\n"
    write_files(root / "start", modules)
    cases = [(fn.name, args, expected) for fn in FUNCTIONS for args, expected in fn.cases]
    tests = (
        '"""Hidden tests for textkit."""\n\nimport pytest\n\nimport textkit\n\nCASES = [\n'
        + "".join(f"    {case!r},\n" for case in cases)
        + "]\n\n\n"
        '@pytest.mark.parametrize(("name", "args", "expected"), CASES)\n'
        "def test_case(name, args, expected):\n"
        "    assert getattr(textkit, name)(*args) == expected\n\n\n"
        "def test_truncate_rejects_a_width_below_the_suffix():\n"
        "    with pytest.raises(ValueError):\n"
        '        textkit.truncate("abcdef", 2)\n'
    )
    write_files(root / "hidden", {"test_textkit.py": tests, "pytest.ini": "[pytest]\n"})
    write_files(root / "solution", {"units.json": dump_units(units)})
    (root / "goal.md").write_text("\n".join(goal), encoding="utf-8")
    return PARTS


def _write_scale_parts(root: Path, units: int) -> list[str]:
    if not 1 <= units <= MAX_SCALE_UNITS:
        raise InvalidInput(f"a scale task needs 1 to {MAX_SCALE_UNITS} units, got {units}")
    width = max(4, len(str(units)))
    files: dict[str, str | bytes] = {"units/__init__.py": "", "README.md": "# units\n"}
    solution: list[Unit] = []
    goal = [
        "# Goal: implement every function in `units/`\n",
        "Each module `units/uNNNN.py` holds one function `fNNNN(x: int) -> int` whose body "
        "raises `NotImplementedError`. Make each return the value below; a hidden test "
        "checks each function.\n",
    ]
    cases = []
    for n in range(1, units + 1):
        ident = f"{n:0{width}d}"
        a, b = n % 7 + 2, n % 11
        path = f"units/u{ident}.py"
        files[path] = (
            f'"""Unit {ident}."""\n\n\ndef f{ident}(x: int) -> int:\n'
            f'    """Return {a} * x + {b}."""\n' + _stub("    ", f"f{ident}")
        )
        edit = Edit(path, _stub("    ", f"f{ident}"), f"    return {a} * x + {b}\n")
        solution.append(Unit(f"u{ident}", f"implement f{ident}", (path,), (edit,)))
        goal.append(f"- `units/u{ident}.py`: `f{ident}(x)` returns `{a} * x + {b}`")
        cases.append(f"    ({ident!r}, {a}, {b}),\n")
    write_files(root / "start", files)
    tests = (
        '"""Hidden tests: one per unit."""\n\nimport importlib\n\nimport pytest\n\nCASES = [\n'
        + "".join(cases)
        + "]\n\n\n"
        '@pytest.mark.parametrize(("ident", "a", "b"), CASES)\n'
        "def test_unit(ident, a, b):\n"
        '    f = getattr(importlib.import_module(f"units.u{ident}"), f"f{ident}")\n'
        "    assert [f(x) for x in (0, 1, -3)] == [b, a + b, -3 * a + b]\n"
    )
    write_files(root / "hidden", {"test_units.py": tests, "pytest.ini": "[pytest]\n"})
    write_files(root / "solution", {"units.json": dump_units(solution)})
    (root / "goal.md").write_text("\n".join(goal) + "\n", encoding="utf-8")
    return PARTS


def prepare_demo(root: Path, options: Mapping[str, Any], *, force: bool, say: Say) -> list[str]:
    """Preparer `demo`: write the textkit task's parts into `root`."""
    parts = _write_demo_parts(root)
    say(f"wrote the textkit demo ({len(FUNCTIONS)} functions): {', '.join(parts)}")
    return parts


def prepare_scale(root: Path, options: Mapping[str, Any], *, force: bool, say: Say) -> list[str]:
    """Preparer `scale`: write `prepare_options.units` independent units into `root`."""
    units = options.get("units", 64)
    if not isinstance(units, int) or isinstance(units, bool):
        raise InvalidInput(f"{root / TASK_FILE}: prepare_options.units must be an integer")
    parts = _write_scale_parts(root, units)
    say(f"wrote a scale task with {units} units: {', '.join(parts)}")
    return parts


def make_demo_task(directory: str | Path, *, budget: str = "20m") -> Task:
    """Write a complete, ready textkit task (task.toml included) into `directory`."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    _write_demo_parts(root)
    toml = TASK_TOML.format(name="textkit", command=PYTEST_EVAL, timeout=120, budget=budget)
    (root / TASK_FILE).write_text(toml, encoding="utf-8")
    return load_task(root)


def make_scale_task(directory: str | Path, units: int = 64, *, budget: str = "30m") -> Task:
    """Write a complete task with `units` independent one-file units into `directory`."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    _write_scale_parts(root, units)
    timeout = 120 + units // 4  # importing many modules takes a while on a small machine
    name = f"scale-{units}"
    toml = TASK_TOML.format(name=name, command=PYTEST_EVAL, timeout=timeout, budget=budget)
    (root / TASK_FILE).write_text(toml, encoding="utf-8")
    return load_task(root)
