"""A task's oracle as the hub runs it: the original program, copied into the run directory.

Whoever sets a run up (`swarm run`, the compose bootstrap) publishes the task's oracle with
`publish_oracle`: the top folder holding the task's `oracle` path is copied to
`<run_dir>/oracle/` (agents never see the run directory), with a manifest, `oracle.json`,
saying how to start it. The hub reads that copy (`published_oracle`) and runs it for
`POST /v1/oracle` (swarm.tasks.rebuild.oracle_run), so it needs nothing of the task itself.

The manifest of an imported program names its ELF interpreter, library folders and
executable, so it is started as `<interpreter> --library-path ... --argv0 <program>
<executable>`: no path reaches its environment or its argv. An oracle without a manifest (a
wrapper script, as the commonmark task's) is run as the script itself.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarm.errors import InvalidInput
from swarm.tasks.model import Task

RUN_DIR_NAME = "oracle"
MANIFEST = "oracle.json"


@dataclass(frozen=True)
class OracleProgram:
    """How to start the oracle; paths are relative to `root`, the folder that holds it."""

    root: Path
    program: str  # its name, as argv[0] and in messages
    command: str  # the file to execute (a wrapper), when there is no interpreter
    interpreter: str | None = None  # absolute: the ELF interpreter on the host
    executable: str | None = None  # the ELF file the interpreter loads
    library_path: tuple[str, ...] = field(default_factory=tuple)
    # Absolute paths the program's packages install: where this machine has them installed
    # too, agents' sandboxes mask them (else an agent could run and read that copy).
    installed: tuple[str, ...] = field(default_factory=tuple)

    def manifest(self) -> dict[str, Any]:
        return {
            "program": self.program,
            "command": self.command,
            "interpreter": self.interpreter,
            "executable": self.executable,
            "library_path": list(self.library_path),
            "installed": list(self.installed),
        }


def elf_interpreter(path: Path) -> str | None:
    """The PT_INTERP (dynamic loader) of a little-endian ELF file, or None (a script, a
    static binary)."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or len(data) < 64 or data[5] != 1:
        return None
    wide = data[4] == 2  # ELFCLASS64
    (table,) = struct.unpack_from("<Q" if wide else "<I", data, 32 if wide else 28)
    entry_size, entries = struct.unpack_from("<HH", data, 54 if wide else 42)
    for index in range(entries):
        at = table + index * entry_size
        if struct.unpack_from("<I", data, at)[0] != 3:  # PT_INTERP
            continue
        if wide:
            (offset,), (size,) = (
                struct.unpack_from("<Q", data, at + 8),
                struct.unpack_from("<Q", data, at + 32),
            )
        else:
            (offset,), (size,) = (
                struct.unpack_from("<I", data, at + 4),
                struct.unpack_from("<I", data, at + 16),
            )
        return data[offset : offset + size].rstrip(b"\x00").decode("utf-8", errors="replace")
    return None


def write_manifest(program: OracleProgram) -> Path:
    path = program.root / MANIFEST
    path.write_text(json.dumps(program.manifest(), indent=1) + "\n", encoding="utf-8")
    return path


def read_manifest(root: Path, default_command: str) -> OracleProgram:
    """The oracle in `root` as its manifest describes it, else `default_command` run as is."""
    path = root / MANIFEST
    if not path.is_file():
        return OracleProgram(root, Path(default_command).name, default_command)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return OracleProgram(
            root=root,
            program=str(data["program"]),
            command=str(data["command"]),
            interpreter=data.get("interpreter") or None,
            executable=data.get("executable") or None,
            library_path=tuple(str(p) for p in data.get("library_path") or ()),
            installed=tuple(str(p) for p in data.get("installed") or ()),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(f"{path} is not an oracle manifest: {exc}") from None


def _top_folder(task: Task) -> tuple[Path, str]:
    """The part of the task to copy (the top folder holding the oracle, or the oracle file)
    and the oracle's path inside that copy."""
    assert task.oracle_path is not None
    relative = task.oracle_path.relative_to(task.root)
    if len(relative.parts) == 1:
        return task.oracle_path, relative.name
    return task.root / relative.parts[0], str(Path(*relative.parts[1:]))


def task_oracle(task: Task) -> OracleProgram | None:
    """The task's own oracle as its manifest describes it (None when it has none)."""
    if task.oracle_path is None:
        return None
    source, command = _top_folder(task)
    return read_manifest(source if source.is_dir() else source.parent, command)


def publish_oracle(task: Task, run_dir: Path) -> OracleProgram | None:
    """Copy the task's oracle into `run_dir/oracle` (replacing an earlier copy); None when the
    task has none."""
    target = run_dir / RUN_DIR_NAME
    if task.oracle_path is None:
        shutil.rmtree(target, ignore_errors=True)
        return None
    source, command = _top_folder(task)
    staging = run_dir / f".{RUN_DIR_NAME}.new"
    shutil.rmtree(staging, ignore_errors=True)
    if source.is_dir():
        shutil.copytree(source, staging, symlinks=True)
    else:
        staging.mkdir(parents=True)
        shutil.copy2(source, staging / command)
    program = read_manifest(staging, command)
    if not (staging / MANIFEST).exists():
        write_manifest(program)
    old = run_dir / f".{RUN_DIR_NAME}.old"
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        os.replace(target, old)
    os.replace(staging, target)  # the hub sees the old copy or the new one, whole
    shutil.rmtree(old, ignore_errors=True)
    return read_manifest(target, command)


def published_oracle(run_dir: Path) -> OracleProgram | None:
    """The oracle published for this run, or None."""
    root = run_dir / RUN_DIR_NAME
    if not (root / MANIFEST).is_file():
        return None
    return read_manifest(root, "")
