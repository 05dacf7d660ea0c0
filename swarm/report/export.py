"""`swarm export`: one archive holding a run's database, its repository as a git bundle, the
evaluator's log and run.toml, which `swarm report` and the hub can open on another machine."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert, select
from sqlalchemy.engine import make_url

from swarm import __version__
from swarm.db import Database, metadata
from swarm.report.runinfo import read_run_info
from swarm.report.source import BUNDLE, database_url

BATCH = 5000
# Never packed: the operator token is a secret; the worker checkouts can be rebuilt from git.
# Secrets (the operator token; the Mattermost adapter's bot tokens) never leave the machine.
SKIPPED = {
    "operator.token",
    "hub.db",
    "hub.db-wal",
    "hub.db-shm",
    "hub-mattermost.db",
    "hub-mattermost.db-wal",
    "hub-mattermost.db-shm",
    "workspace.git",
    "workers",
}


def copy_database(url: str, target: Path) -> None:
    """A consistent SQLite copy of the run's database (PostgreSQL's is copied table by table)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        source = sqlite3.connect(parsed.database)
        copy = sqlite3.connect(target)
        with copy:
            source.backup(copy)  # the online backup API: safe while the hub still writes
        copy.close()
        source.close()
        return
    src, dst = Database(url), Database(f"sqlite:///{target}")
    dst.create_schema()
    try:
        with src.read() as read, dst.write() as write:
            for table in metadata.sorted_tables:
                rows = read.execute(select(table)).mappings()
                while chunk := rows.fetchmany(BATCH):
                    write.execute(insert(table), [dict(r) for r in chunk])
    finally:
        src.dispose()
        dst.dispose()


def export_run(run_dir: Path, out: Path | None = None) -> Path:
    """Pack `run_dir` into `out` (default <run_dir>.tar.gz beside it); answers the archive."""
    run_dir = run_dir.resolve()
    info = read_run_info(run_dir)
    out = (out or run_dir.with_name(run_dir.name + ".tar.gz")).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="swarm-export-") as tmp:
        stage = Path(tmp) / info.name
        stage.mkdir()
        copy_database(database_url(run_dir, info), stage / "hub.db")
        repo = run_dir / "workspace.git"
        if repo.exists():
            subprocess.run(
                ["git", "bundle", "create", str(stage / BUNDLE), "--all"],
                cwd=repo, check=True, capture_output=True,
            )  # fmt: skip
        manifest = {"format": 1, "swarm": __version__, "run": info.name,
                    "exported_at": time.time(), "database": "hub.db",
                    "workspace": BUNDLE if repo.exists() else None}  # fmt: skip
        (stage / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        with tarfile.open(out, "w:gz") as tar:
            for item in sorted(stage.iterdir()):
                tar.add(item, arcname=f"{info.name}/{item.name}")
            for item in sorted(run_dir.iterdir()):
                if item.name not in SKIPPED and not (stage / item.name).exists():
                    tar.add(item, arcname=f"{info.name}/{item.name}")  # run.toml, eval/, logs
    return out
