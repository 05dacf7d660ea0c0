"""Opening a run for reading: a run directory, or an archive made by `swarm export`."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from swarm.archive import extract_all
from swarm.db import Database
from swarm.errors import InvalidInput, NotFound
from swarm.report.runinfo import RunInfo, read_run_info

BUNDLE = "workspace.bundle"
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")


@dataclass
class RunSource:
    """One run's database, repository and description, open for reading."""

    run_dir: Path
    db: Database
    info: RunInfo
    git_dir: Path | None
    _tmp: list[tempfile.TemporaryDirectory[str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.info.name

    def close(self) -> None:
        self.db.dispose()
        for tmp in self._tmp:
            tmp.cleanup()

    def __enter__(self) -> RunSource:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def is_archive(path: Path) -> bool:
    return path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES)


def unpack(archive: Path, into: Path) -> Path:
    """Unpack an export into a run directory the hub and the report can open; answers it."""
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        roots = {n.split("/", 1)[0] for n in names}
        if len(roots) != 1:
            raise InvalidInput(f"{archive} is not a swarm export (expected one top folder)")
        extract_all(tar, into)
    run_dir = into / roots.pop()
    bundle = run_dir / BUNDLE
    repo = run_dir / "workspace.git"
    if bundle.exists() and not repo.exists():
        subprocess.run(
            ["git", "clone", "--quiet", "--bare", str(bundle), str(repo)],
            check=True,
            capture_output=True,
        )
    return run_dir


def database_url(run_dir: Path, info: RunInfo) -> str:
    db_file = run_dir / "hub.db"
    if db_file.exists():
        return f"sqlite:///{db_file.resolve()}"
    if info.database_url:
        return info.database_url
    raise NotFound(f"{run_dir} has no hub.db and its run.toml names no database_url")


def open_run(path: Path) -> RunSource:
    """Open a run directory or an export archive (unpacked into a temporary folder)."""
    tmps: list[tempfile.TemporaryDirectory[str]] = []
    if is_archive(path):
        tmp = tempfile.TemporaryDirectory(prefix="swarm-run-")
        tmps.append(tmp)
        run_dir = unpack(path, Path(tmp.name))
    elif path.is_dir():
        run_dir = path
    else:
        raise NotFound(f"{path} is neither a run directory nor a .tar.gz made by swarm export")
    info = read_run_info(run_dir)
    db = Database(database_url(run_dir, info))
    git_dir = run_dir / "workspace.git"
    return RunSource(run_dir, db, info, git_dir if git_dir.exists() else None, tmps)


def copy_tree(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, dirs_exist_ok=True)
