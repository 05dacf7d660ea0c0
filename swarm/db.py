"""The hub's database: one SQLAlchemy engine (SQLite in WAL mode by default, PostgreSQL by URL).

Every part keeps its tables on the shared `metadata`; `Database.create_schema()` builds them and
the engine-specific DDL (append-only triggers, commit-ordered ids, trigram indexes).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, MetaData, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from swarm.errors import Unavailable

metadata = MetaData()

# Tables whose ids must be handed out in commit order (cursors read them "since id N").
# On PostgreSQL a BEFORE INSERT trigger takes a transaction-scoped advisory lock and only
# then draws the id, so a lower id can never become visible after a higher one.
COMMIT_ORDERED_TABLES = {"entries": 727001, "messages": 727002}
APPEND_ONLY_TABLES = ("entries", "messages")


def _sqlite_ddl() -> list[str]:
    ddl = [
        "CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5("
        "body, scope, content='entries', content_rowid='id', tokenize='trigram')",
        "CREATE TRIGGER IF NOT EXISTS entries_fts_insert AFTER INSERT ON entries BEGIN "
        "INSERT INTO entries_fts(rowid, body, scope) VALUES (new.id, new.body, new.scope); END",
    ]
    for table in APPEND_ONLY_TABLES:
        for op in ("UPDATE", "DELETE"):
            ddl.append(
                f"CREATE TRIGGER IF NOT EXISTS {table}_no_{op.lower()} BEFORE {op} ON {table} "
                f"BEGIN SELECT RAISE(ABORT, '{table} are append-only: {op} is not allowed'); END"
            )
    return ddl


def _postgres_ddl() -> list[str]:
    ddl = [
        "CREATE EXTENSION IF NOT EXISTS pg_trgm",
        "CREATE OR REPLACE FUNCTION swarm_append_only() RETURNS trigger AS $$ BEGIN "
        "RAISE EXCEPTION '% are append-only: % is not allowed', TG_TABLE_NAME, TG_OP; END $$ "
        "LANGUAGE plpgsql",
    ]
    for table, lock_key in COMMIT_ORDERED_TABLES.items():
        ddl += [
            f"CREATE SEQUENCE IF NOT EXISTS {table}_commit_seq",
            f"CREATE OR REPLACE FUNCTION swarm_{table}_assign_id() RETURNS trigger AS $$ BEGIN "
            f"PERFORM pg_advisory_xact_lock({lock_key}); "
            f"NEW.id := nextval('{table}_commit_seq'); RETURN NEW; END $$ LANGUAGE plpgsql",
            f"DROP TRIGGER IF EXISTS {table}_assign_id ON {table}",
            f"CREATE TRIGGER {table}_assign_id BEFORE INSERT ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION swarm_{table}_assign_id()",
        ]
    for table in APPEND_ONLY_TABLES:
        ddl += [
            f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}",
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION swarm_append_only()",
            f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}",
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION swarm_append_only()",
        ]
    return ddl


def _postgres_trigram_indexes(trgm_schema: str) -> list[str]:
    # The operator class lives where the extension was installed, which may not be on the
    # search_path (e.g. a hub whose tables live in their own schema).
    opclass = f'"{trgm_schema}".gin_trgm_ops'
    return [
        f"CREATE INDEX IF NOT EXISTS entries_body_trgm ON entries USING gin (body {opclass})",
        f"CREATE INDEX IF NOT EXISTS entries_scope_trgm ON entries USING gin (scope {opclass})",
    ]


class Database:
    """An engine plus the two kinds of transaction the hub uses: reads and serialized writes."""

    def __init__(self, url: str, *, echo: bool = False, pool_size: int = 16) -> None:
        self.url = url
        parsed = make_url(url)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        self._write_lock = threading.Lock()
        kwargs: dict[str, Any] = {"echo": echo}
        if self.is_sqlite:
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 60}
            kwargs["pool_size"] = pool_size
            kwargs["max_overflow"] = 64
        else:
            kwargs["pool_size"] = pool_size
            kwargs["max_overflow"] = 64
            kwargs["pool_recycle"] = 1800
            # A ping per checkout costs a round trip per call, but without it a connection the
            # server dropped (a restart, pg_terminate_backend) failed the next call with a 500.
            kwargs["pool_pre_ping"] = os.environ.get("SWARM_DB_PRE_PING", "1") != "0"
        self.engine: Engine = create_engine(url, **kwargs)
        # Writers begin IMMEDIATE on SQLite (set once here: per-connection options cost ~0.1 ms).
        self._immediate = self.engine.execution_options(sqlite_begin="IMMEDIATE")
        if self.is_sqlite:
            _configure_sqlite(self.engine)

    @property
    def dialect(self) -> str:
        return "sqlite" if self.is_sqlite else "postgresql"

    def create_schema(self) -> None:
        """Create every table and the engine-specific DDL; safe to run again."""
        import swarm.context.schema
        import swarm.evaluation.schema
        import swarm.hub.hublog
        import swarm.hub.idempotency
        import swarm.messages.schema
        import swarm.worker.schema
        import swarm.workspace.schema  # noqa: F401

        try:
            with self._write_lock, self.engine.begin() as conn:
                if not self.is_sqlite:
                    # Two hub replicas starting together must not race on CREATE.
                    conn.execute(text("SELECT pg_advisory_xact_lock(727000)"))
                metadata.create_all(conn)
                for statement in _sqlite_ddl() if self.is_sqlite else _postgres_ddl():
                    conn.execute(text(statement))
                if not self.is_sqlite:
                    trgm_schema = conn.execute(
                        text(
                            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
                            "ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'"
                        )
                    ).scalar_one()
                    for statement in _postgres_trigram_indexes(trgm_schema):
                        conn.execute(text(statement))
        except OperationalError as exc:
            raise Unavailable(f"cannot open the database at {self.safe_url}: {exc.orig}") from exc

    @property
    def safe_url(self) -> str:
        return make_url(self.url).render_as_string(hide_password=True)

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction (a consistent snapshot on SQLite)."""
        with self.engine.connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction. On SQLite writes are serialized in-process and begin IMMEDIATE,
        so two writers never deadlock upgrading a read lock."""
        if self.is_sqlite:
            with self._write_lock, self._immediate.connect() as conn, conn.begin():
                yield conn
        else:
            with self.engine.begin() as conn:
                yield conn

    def dispose(self) -> None:
        self.engine.dispose()


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the sqlite3 module so BEGIN is ours to emit.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")
