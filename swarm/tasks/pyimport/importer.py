"""`import_python`: a task from a Python project (PyPI sdist, folder or git revision).

The task's start is the project with its function and method bodies stubbed (swarm.tasks.
pyimport.stub), keeping those that importing the package or collecting its tests runs (found by
probing, swarm.tasks.pyimport.probe); its hidden tests are the project's own tests, moved out
with the pytest configuration they need; its goal is the README and the public API; its
solution is the stubbed bodies as independent units. The task is complete on disk (no
`prepare` step): `swarm task check` then scores it.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from swarm.errors import Conflict, InvalidInput
from swarm.tasks.model import load_task
from swarm.tasks.prepare import write_files
from swarm.tasks.pyimport.goal import write_goal
from swarm.tasks.pyimport.layout import (
    Layout,
    dependencies,
    find_layout,
    other_packages,
    pytest_options,
    summary,
)
from swarm.tasks.pyimport.probe import Failure, collect_failures, import_failures
from swarm.tasks.pyimport.source import SKIPPED, Project, fetch_project, parse_source
from swarm.tasks.pyimport.stub import Stub, stub_source
from swarm.tasks.pyimport.units import build_units, module_name
from swarm.tasks.units import check_independent, dump_units

Say = Callable[[str], None]
MAX_ROUNDS = 40
START_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "MANIFEST.in")
GENERATED = ("start", "hidden", "solution", "goal.md", "import.json", "check")


def _quiet(_line: str) -> None:
    return None


@dataclass(frozen=True)
class ImportOptions:
    rev: str | None = None
    package: str | None = None
    tests: tuple[str, ...] = ()
    docs: str | None = None
    name: str | None = None
    dependencies: tuple[str, ...] = ()
    budget: str = "1h"
    force: bool = False


def task_name(project_name: str) -> str:
    """A task name from a distribution's: lower case, words joined by `-`."""
    name = re.sub(r"[^a-z0-9]+", "-", project_name.lower()).strip("-")
    return name or "task"


def default_dest(source: str, name: str | None = None) -> Path:
    """Where `swarm task import SOURCE` puts the task without DEST: tasks/NAME here."""
    if name:
        return Path("tasks") / name
    if source.startswith("debian:"):
        return Path("tasks") / task_name(source.removeprefix("debian:"))
    kind, where, _ = parse_source(source)
    if kind == "pypi":
        return Path("tasks") / task_name(where)
    base = re.sub(r"\.git$", "", where.rstrip("/").rsplit("/", 1)[-1])
    return Path("tasks") / task_name(base)


def _check_dest(dest: Path, force: bool) -> None:
    """Refuse a DEST that holds a task (without force) or other files."""
    if (dest / "task.toml").exists():
        if not force:
            raise Conflict(f"{dest} already holds a task; use --force to import it again")
    elif dest.exists() and any(dest.iterdir()):
        raise Conflict(f"{dest} is not empty and holds no task; choose another DEST")


def _prepare_dest(dest: Path, force: bool) -> None:
    _check_dest(dest, force)
    if (dest / "task.toml").exists():
        for part in GENERATED:
            target = dest / part
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    dest.mkdir(parents=True, exist_ok=True)


def _hidden_path(test: str, layout: Layout, root: Path) -> str:
    """Where a test path goes under hidden/: tests inside the package move to tests/ (the
    package's tests/ folder becomes tests/, a test module beside the code tests/<module>)."""
    if Path(test).is_relative_to(layout.package):
        inner = Path(test).relative_to(layout.package)
        if (root / test).is_dir() and len(inner.parts) == 1:
            return "tests"
        return str(Path("tests") / inner)
    return test


def _copy_start(project: Project, layout: Layout, start: Path) -> None:
    root = project.root
    inside = [Path(t) for t in layout.tests if Path(t).is_relative_to(layout.package)]

    def ignore(folder: str, names: list[str]) -> list[str]:
        here = Path(folder).relative_to(root)
        return [n for n in names if n in ("__pycache__",) or (here / n) in inside]

    target = start / layout.package
    target.parent.mkdir(parents=True, exist_ok=True)
    if (root / layout.package).is_dir():
        shutil.copytree(root / layout.package, target, ignore=ignore)
    else:
        shutil.copy2(root / layout.package, target)
    for name in [*START_FILES, *(p.name for p in root.glob("LICEN[CS]E*")),
                 *(p.name for p in root.glob("COPYING*"))]:  # fmt: skip
        if (root / name).is_file():
            shutil.copy2(root / name, start / name)
    for other in other_packages(root, layout.package):
        shutil.copytree(root / other, start / other, ignore=shutil.ignore_patterns(*SKIPPED))
    if layout.readme:
        shutil.copy2(root / layout.readme, start / layout.readme)
    if layout.docs and (root / layout.docs).is_dir():
        shutil.copytree(root / layout.docs, start / layout.docs, ignore=ignore)


_RELATIVE = re.compile(r"\bfrom\s+(\.+)([\w.]*)\s+import\b")


def absolute_imports(text: str, package: str) -> str:
    """`text` (a test module of the package `package`, e.g. "toolz.tests") with its relative
    imports made absolute: moved out of the package, `from . import x` would not import."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        parts = package.split(".")
        base = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
        target = ".".join([*base, *([node.module] if node.module else [])])
        index = node.lineno - 1
        lines[index] = _RELATIVE.sub(f"from {target} import", lines[index], count=1)
    return "".join(lines)


def _copy_hidden(project: Project, layout: Layout, hidden: Path) -> list[str]:
    """The project without its package under hidden/: its tests with whatever they read or
    import besides the package (conftest.py, data, helper modules, the README), tests inside
    the package moved to tests/, and a pytest.ini; returns the test paths within hidden/."""
    root = project.root
    packages = {root / p for p in [layout.package, *other_packages(root, layout.package)]}
    inside = [root / t for t in layout.tests if Path(t).is_relative_to(layout.package)]

    def ignore(folder: str, names: list[str]) -> list[str]:
        here = Path(folder)
        return [
            n for n in names
            if n in SKIPPED or n.endswith(".egg-info") or here / n in packages
            or here / n in inside
        ]  # fmt: skip

    shutil.copytree(root, hidden, ignore=ignore, symlinks=True)
    paths = []
    for test in layout.tests:
        relative = _hidden_path(test, layout, root)
        if Path(test).is_relative_to(layout.package):
            target = hidden / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if (root / test).is_dir():
                shutil.copytree(root / test, target, ignore=shutil.ignore_patterns(*SKIPPED))
            else:
                shutil.copy2(root / test, target)
            moved = [target] if target.is_file() else sorted(target.rglob("*.py"))
            for file in moved:
                inner = file.relative_to(hidden / "tests")
                where = Path(test) if (root / test).is_dir() else Path(test).parent
                package_dir = where / inner.parent if (root / test).is_dir() else where
                dotted = module_name(str(package_dir / "__init__.py"), layout.source_root)
                text = file.read_text(encoding="utf-8", errors="replace")
                file.write_text(absolute_imports(text, dotted), encoding="utf-8")
        paths.append(relative)
    options = pytest_options(root)
    ini = ["[pytest]"] + [f"{key} = {value}" for key, value in options.items()]
    (hidden / "pytest.ini").write_text("\n".join(ini) + "\n", encoding="utf-8")
    return paths


def _task_toml(name: str, project: Project, layout: Layout, tests: list[str], deps: list[str],
               budget: str) -> str:  # fmt: skip
    paths = " ".join("{hidden}/" + t for t in tests)
    prefix = f'PYTHONPATH="$PWD/{layout.source_root}:$PYTHONPATH" ' if layout.source_root else ""
    lines = [
        f"# Imported by `swarm task import {project.origin}`: start/ is the project with its",
        "# function bodies stubbed, hidden/ its own tests, solution/ the stubbed bodies.",
        f'name = "{name}"',
        'goal = "goal.md"',
        'start = "start"',
        'hidden_tests = "hidden"',
        f"eval_command = '{prefix}python -m pytest -q --tb=line {paths}'",
        "eval_timeout = 600",
        f'budget = "{budget}"',
        'solution = "solution/units.json"',
    ]
    if deps:
        lines += ["", "[environment]", "dependencies = " + json.dumps(deps)]
    return "\n".join(lines) + "\n"


def import_python(
    source: str, dest: Path, options: ImportOptions | None = None, *, say: Say = _quiet
) -> Path:
    """Make `dest` a task from the Python project `source`; returns `dest`."""
    options = options or ImportOptions()
    dest = Path(dest).resolve()
    parse_source(source)  # an unknown form stops here, before anything is written
    _check_dest(dest, options.force)
    with tempfile.TemporaryDirectory(prefix="swarm-import-") as scratch:
        say(f"fetching {source}" + (f" at {options.rev}" if options.rev else "") +
            " (or the cached copy)")  # fmt: skip
        project = fetch_project(source, options.rev, Path(scratch), force=options.force)
        layout = find_layout(project.root, project.name, package=options.package,
                             tests=options.tests, docs=options.docs)  # fmt: skip
        say(f"package {layout.package}, tests {', '.join(layout.tests)}, docs "
            f"{layout.docs or 'none'}, readme {layout.readme or 'none'}")  # fmt: skip
        _prepare_dest(dest, options.force)
        start, hidden = dest / "start", dest / "hidden"
        _copy_start(project, layout, start)
        tests = _copy_hidden(project, layout, hidden)
        deps = list(dict.fromkeys([*dependencies(project.root), *options.dependencies]))
        name = options.name or task_name(project.name)
        (dest / "task.toml").write_text(
            _task_toml(name, project, layout, tests, deps, options.budget), encoding="utf-8"
        )
        readme = (project.root / layout.readme).read_text(encoding="utf-8", errors="replace") \
            if layout.readme else None  # fmt: skip
        originals = {f: (project.root / f).read_text(encoding="utf-8")
                     for f in layout.package_files(project.root)}  # fmt: skip
        about = summary(project.root)
    # Placeholders until they are written below: the task loads (for its environment) now.
    (dest / "goal.md").write_text("", encoding="utf-8")
    write_files(dest / "solution", {"units.json": "[]"})
    task = load_task(dest)
    from swarm.tasks.environment import task_environment

    env = task_environment(task, say=say)
    python = env.python if env else Path(sys.executable)
    stubs, texts, kept = _stub_until_importable(originals, layout, start, hidden, tests, python,
                                                say)  # fmt: skip
    units = build_units(stubs, texts, layout.source_root)
    check_independent(units, start)
    write_files(dest / "solution", {"units.json": dump_units(units)})
    goal = write_goal(name=project.name, version=project.version, summary=about, layout=layout,
                      readme=readme, stubs=stubs, kept=len(kept))  # fmt: skip
    (dest / "goal.md").write_text(goal, encoding="utf-8")
    provenance = {
        "source": project.origin,
        "package": layout.package,
        "tests": list(layout.tests),
        "docs": layout.docs,
        "dependencies": deps,
        "stubbed": len(stubs),
        "kept_for_import": kept,
        "units": len(units),
    }
    (dest / "import.json").write_text(json.dumps(provenance, indent=1) + "\n", encoding="utf-8")
    say(f"stubbed {len(stubs)} functions in {len(texts)} files ({len(kept)} kept for import), "
        f"{len(units)} solution units")  # fmt: skip
    return dest


def _stub_until_importable(
    originals: dict[str, str],
    layout: Layout,
    start: Path,
    hidden: Path,
    tests: list[str],
    python: Path,
    say: Say,
) -> tuple[list[Stub], dict[str, str], list[str]]:
    """Stub every file, then put back the bodies that importing the package (or collecting its
    tests) runs, probing again until nothing a stub raises breaks either; returns the stubs, the
    stubbed texts and the names kept."""
    pythonpath = [start / layout.source_root] if layout.source_root else [start]
    modules = [m for m in (module_name(f, layout.source_root) for f in originals)
               if not m.endswith("__main__")]  # fmt: skip

    def probe() -> list[Failure]:
        found = import_failures(modules, start, python, pythonpath)
        if found and baseline is not None:  # collect once the package imports
            return found
        return found + collect_failures(hidden, tests, start, python, pythonpath)

    baseline: set[str] | None = None
    write_files(start, dict(originals), fresh=False)
    baseline = {f.where for f in probe()}  # what fails with the real code too is not ours
    if baseline:
        failing = ", ".join(sorted(baseline)[:5])
        say(f"these fail with the original code too (left as they are): {failing}")
    keep: dict[str, set[str]] = {path: set() for path in originals}
    for _round in range(MAX_ROUNDS):
        texts: dict[str, str] = {}
        stubs: list[Stub] = []
        for path, text in originals.items():
            stubbed, found = stub_source(text, path, frozenset(keep[path]))
            for stub in found:
                if stubbed.count(stub.stub) != 1:  # the text was in the code already
                    keep[path].add(stub.qualname)
            stubbed, found = stub_source(text, path, frozenset(keep[path]))
            texts[path] = stubbed
            stubs += found
        write_files(start, texts, fresh=False)
        failures = [f for f in probe() if f.where not in baseline]
        if not failures:
            kept = sorted(f"{module_name(p, layout.source_root)}.{q}" for p, names in keep.items()
                          for q in names)  # fmt: skip
            return stubs, {p: t for p, t in texts.items() if t != originals[p]}, kept
        for failure in failures:
            culprit = _stub_at(failure, stubs, texts, start)
            if culprit is None:
                last = failure.last
                at = f"{_shown(last[0], start)}:{last[1]}" if last else "an unknown line"
                raise InvalidInput(
                    f"with its functions stubbed, {failure.where} does not import: {at}: "
                    f"{failure.error}; give --package for another package, or fix the source"
                )
            if culprit.qualname in keep[culprit.path]:
                continue
            keep[culprit.path].add(culprit.qualname)
            say(f"kept {module_name(culprit.path, layout.source_root)}.{culprit.qualname}: "
                f"{failure.where} runs it at import time")  # fmt: skip
    raise InvalidInput(
        f"the stubbed package still does not import after {MAX_ROUNDS} rounds of putting bodies "
        "back; the package may do too much at import time to be stubbed"
    )


def _shown(file: str, start: Path) -> str:
    path = Path(file)
    return str(path.relative_to(start)) if path.is_relative_to(start) else file


def _stub_at(
    failure: Failure, stubs: list[Stub], texts: dict[str, str], start: Path
) -> Stub | None:
    """The stub whose raise line is the innermost frame of the failure, if it is one."""
    from swarm.tasks.pyimport.stub import stub_line

    for file, line in reversed(failure.frames):
        path = Path(file)
        if not path.is_relative_to(start):
            continue
        relative = str(path.relative_to(start))
        for stub in stubs:
            if stub.path == relative and stub_line(texts[relative], stub) == line:
                return stub
        return None
    return None
