"""What breaks when the stubbed package is imported, found by importing it (in a subprocess).

Two probes, each reporting every exception with its traceback's frames: importing each module
of the package, and pytest collecting the hidden tests (test modules that call the package at
import time, parametrize lists built from it). A failure whose innermost frame is a stub's raise
line names a function that importing needs: the importer puts its body back and probes again.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from swarm.errors import Unavailable

_IMPORT = r"""
import importlib, json, sys, traceback
out = []
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except BaseException as exc:
        frames = [[f.filename, f.lineno] for f in traceback.extract_tb(exc.__traceback__)]
        out.append({"where": name, "error": f"{type(exc).__name__}: {exc}"[:300],
                    "frames": frames})
        top = name.split(".")[0]  # a clean start for the next module: no half-imported parents
        for loaded in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
            del sys.modules[loaded]
print("\n" + json.dumps(out))
"""

_COLLECT_PLUGIN = r"""
import json, os, traceback

_OUT = open(os.environ["SWARM_PROBE_OUT"], "a", encoding="utf-8")


def pytest_exception_interact(node, call, report):
    info = call.excinfo
    if info is None:
        return
    frames = [[f.filename, f.lineno] for f in traceback.extract_tb(info.tb)]
    error = f"{info.type.__name__}: {info.value}"[:300]
    _OUT.write(json.dumps({"where": node.nodeid, "error": error, "frames": frames}) + "\n")
    _OUT.flush()
"""


@dataclass(frozen=True)
class Failure:
    where: str  # the module, or the test module pytest could not collect
    error: str
    frames: tuple[tuple[str, int], ...]

    @property
    def last(self) -> tuple[str, int] | None:
        return self.frames[-1] if self.frames else None


def _env(home: Path, python: Path, pythonpath: list[Path]) -> dict[str, str]:
    from swarm.evaluation.evaluate import clean_env

    env = clean_env(home, python.parent)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    return env


def import_failures(
    modules: list[str], cwd: Path, python: Path, pythonpath: list[Path]
) -> list[Failure]:
    """Each module of `modules` that raises when imported (one process imports them all)."""
    with tempfile.TemporaryDirectory(prefix="swarm-probe-") as home:
        done = subprocess.run(
            [str(python), "-c", _IMPORT, json.dumps(modules)], cwd=cwd, capture_output=True,
            text=True, timeout=300, env=_env(Path(home), python, pythonpath),
        )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise Unavailable(
            f"the import probe did not run ({python}): {done.stderr.strip()[-300:] or 'no output'}"
        )
    return [_failure(item) for item in json.loads(lines[-1])]


def collect_failures(
    hidden: Path, tests: list[str], cwd: Path, python: Path, pythonpath: list[Path]
) -> list[Failure]:
    """The exceptions raised while pytest collects the hidden tests (run from `cwd`)."""
    with tempfile.TemporaryDirectory(prefix="swarm-probe-") as scratch:
        base = Path(scratch)
        (base / "_swarm_probe.py").write_text(_COLLECT_PLUGIN, encoding="utf-8")
        out = base / "failures.jsonl"
        out.touch()
        env = _env(base, python, [*pythonpath, base])
        env["SWARM_PROBE_OUT"] = str(out)
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        ini = hidden / "pytest.ini"
        command = [str(python), "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                   "-p", "_swarm_probe", "--rootdir", str(hidden), "--confcutdir", str(hidden),
                   "--continue-on-collection-errors"]  # fmt: skip
        if ini.is_file():
            command += ["-c", str(ini)]
        done = subprocess.run(
            [*command, *(str(hidden / t) for t in tests)], cwd=cwd, capture_output=True,
            text=True, timeout=600, env=env,
        )  # fmt: skip
        if done.returncode not in (0, 1, 2, 5):
            raise Unavailable(
                f"pytest could not collect the hidden tests (exit {done.returncode}): "
                f"{(done.stdout + done.stderr).strip()[-400:]}"
            )
        lines = out.read_text(encoding="utf-8").splitlines()
    return [_failure(json.loads(line)) for line in lines if line.strip()]


def _failure(item: dict[str, object]) -> Failure:
    frames = item.get("frames")
    found = (
        tuple((str(f[0]), int(f[1])) for f in frames if isinstance(f, list))
        if isinstance(frames, list)
        else ()
    )
    return Failure(str(item.get("where")), str(item.get("error")), found)
