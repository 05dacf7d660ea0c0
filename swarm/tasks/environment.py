"""Per-task Python environments: a venv per (interpreter, dependencies), built once and cached.

`task.toml`'s `[environment]` names an interpreter and pip requirements; `ensure_environment`
returns the venv that holds them, building it the first time under the cache directory
(`$SWARM_CACHE_DIR/envs`). A build happens in a directory of its own and is published by
renaming a symlink over the environment's name, so the name points at a whole environment or at
nothing: a build that is killed leaves an orphan directory (removed by the next build), never a
half environment in use. Builds of the same environment by several processes (the evaluator,
worker processes) wait on one lock file and reuse the first one's result.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from swarm.errors import InvalidInput, Unavailable
from swarm.tasks.fetch import cache_dir
from swarm.tasks.tables import TaskEnvironment

if TYPE_CHECKING:
    from swarm.tasks.model import Task

Say = Callable[[str], None]
READY = ".swarm-env.json"  # written last into a build: its presence means the build finished
BUILD_TIMEOUT = 1800.0


@dataclass(frozen=True)
class PythonEnv:
    """A built environment: its folder (the real one, not the symlink) and its interpreter."""

    path: Path
    python: Path
    base_prefix: Path  # the interpreter's installation, which the venv links to

    @property
    def bin_dir(self) -> Path:
        return self.path / "bin"

    def ro_paths(self) -> tuple[Path, ...]:
        """What a sandbox binds read-only so that the environment runs inside it."""
        paths = [self.path]
        if self.base_prefix not in (Path("/"), Path("/usr")):
            paths.append(self.base_prefix)
        return tuple(paths)


def _probe(python: str) -> dict[str, str]:
    """The interpreter's real executable, base prefix and version (asked of it: PATH entries
    may be shims that start another program)."""
    code = (
        "import json, sys, platform; print(json.dumps({'executable': sys.executable, "
        "'base_prefix': sys.base_prefix, 'version': platform.python_version()}))"
    )
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise InvalidInput(f"[environment].python {python!r} cannot be run: {exc}") from None
    if done.returncode != 0:
        raise InvalidInput(
            f"[environment].python {python!r} did not start: {done.stderr.strip()[-300:]}"
        )
    info: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return info


@functools.lru_cache(maxsize=16)  # a shim on PATH (pyenv) takes half a second to answer
def find_interpreter(wanted: str | None) -> dict[str, str]:
    """Resolve `[environment].python`: a version ("3.11": `python3.11` on PATH), an absolute
    path, or None (the Python running swarm)."""
    if wanted is None:
        return _probe(sys.executable)
    if Path(wanted).is_absolute():
        if not Path(wanted).is_file():
            raise InvalidInput(f"[environment].python {wanted!r} does not exist")
        return _probe(wanted)
    name = f"python{wanted}"
    found = shutil.which(name)
    if found is None:
        raise InvalidInput(
            f"[environment].python {wanted!r}: no {name} on PATH; install that Python "
            "(e.g. `apt-get install python3.11`) or give an interpreter's absolute path"
        )
    info = _probe(found)
    if not (info["version"] + ".").startswith(wanted + "."):
        raise InvalidInput(f"[environment].python {wanted!r}: {found} is Python {info['version']}")
    return info


def environment_key(interpreter: dict[str, str], dependencies: tuple[str, ...]) -> str:
    """The cache key: the same interpreter and the same set of requirements share one venv."""
    ident = json.dumps([interpreter["executable"], interpreter["version"], sorted(dependencies)])
    return hashlib.sha256(ident.encode()).hexdigest()[:20]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ready(link: Path) -> Path | None:
    """The environment `link` points at, if it finished building."""
    if link.is_symlink() and (link / READY).is_file():
        return link.resolve()
    return None


def _remove_orphans(root: Path, key: str, keep: Path | None) -> None:
    """Builds of `key` that no name points at (killed builds, replaced ones)."""
    for candidate in root.glob(f"{key}.*"):
        if candidate.is_dir() and not candidate.is_symlink() and candidate != keep:
            shutil.rmtree(candidate, ignore_errors=True)


def _stream(command: list[str], say: Say, what: str) -> None:
    """Run a build step, showing its output line by line (pip's own progress)."""
    started = time.monotonic()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    assert process.stdout is not None
    tail: list[str] = []
    for line in process.stdout:
        line = line.rstrip()
        if line:
            say(f"    {line}")
            tail = [*tail[-9:], line]
        if time.monotonic() - started > BUILD_TIMEOUT:
            process.kill()
    if process.wait() != 0:
        raise Unavailable(
            f"building the task's environment failed at {what}: "
            f"{' / '.join(tail[-3:]) or 'no output'} (check the requirements and pip's index)"
        )


def ensure_environment(
    spec: TaskEnvironment, *, extra: tuple[str, ...] = (), say: Say | None = None
) -> PythonEnv | None:
    """The venv of `spec` (plus `extra` requirements), built now if it is not cached; None
    when the task asks for no environment of its own."""
    if spec.is_default:
        return None
    show = say or (lambda line: print(line, file=sys.stderr, flush=True))
    interpreter = find_interpreter(spec.python)
    wanted = tuple(dict.fromkeys((*spec.dependencies, *extra)))
    key = environment_key(interpreter, wanted)
    root = cache_dir() / "envs"
    root.mkdir(parents=True, exist_ok=True)
    link = root / key
    found = _ready(link)
    if found is None:
        with _locked(root / f"{key}.lock"):
            found = _ready(link) or _build(root, key, interpreter, wanted, show)
    return PythonEnv(found, found / "bin" / "python", Path(interpreter["base_prefix"]))


def _build(
    root: Path, key: str, interpreter: dict[str, str], wanted: tuple[str, ...], say: Say
) -> Path:
    link = root / key
    _remove_orphans(root, key, None)
    target = root / f"{key}.{uuid.uuid4().hex[:8]}"
    listed = ", ".join(wanted) or "no packages"
    say(f"building the task's environment: Python {interpreter['version']} with {listed}")
    started = time.monotonic()
    _stream([interpreter["executable"], "-m", "venv", "--without-pip", str(target)], say, "venv")
    if wanted:
        # This process's pip installs into the new venv: no pip inside it, and one pip
        # configuration (index, certificates) for every environment.
        pip = [sys.executable, "-m", "pip", "--python", str(target / "bin" / "python")]
        _stream([*pip, "install", "--no-input", "--progress-bar", "off", *wanted], say, "pip")
    info = {"python": interpreter, "dependencies": list(wanted), "built_at": time.time()}
    (target / READY).write_text(json.dumps(info, indent=1) + "\n")
    staged = root / f".{key}.{uuid.uuid4().hex[:8]}.link"
    staged.symlink_to(target.name)
    os.replace(staged, link)  # atomic: the name now points at the whole environment
    say(f"environment ready in {time.monotonic() - started:.1f}s: {target}")
    return target


def _name(requirement: str) -> str:
    """The distribution name a requirement string starts with, normalised (PEP 503)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    return re.sub(r"[-_.]+", "-", match.group(0)).lower() if match else ""


def task_requirements(task: Task) -> tuple[str, ...]:
    """What the task's environment installs: its dependencies, and for a task scored with
    pytest this process's pytest version unless it names pytest itself (the agents get the
    same environment, so they can run tests the way the evaluator does)."""
    spec = task.environment
    extra: tuple[str, ...] = ()
    if task.uses_pytest and not any(_name(d) == "pytest" for d in spec.dependencies):
        import pytest

        extra = (f"pytest=={pytest.__version__}",)
    return tuple(dict.fromkeys((*spec.dependencies, *extra)))


def task_environment(task: Task, *, say: Say | None = None) -> PythonEnv | None:
    """The environment of `task` (None: the Python running swarm), built now if need be."""
    if task.environment.is_default:
        return None
    spec = TaskEnvironment(task.environment.python, task_requirements(task))
    return ensure_environment(spec, say=say)
