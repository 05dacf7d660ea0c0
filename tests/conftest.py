"""Shared fixtures: real SQLite and PostgreSQL databases, a real hub on loopback, workers."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from swarm.bootstrap import Runtime, build_runtime
from swarm.config import Settings
from swarm.db import Database
from swarm.hub.server import BackgroundHub
from swarm.tools.client import HubClient

POSTGRES_URL = os.environ.get(
    "SWARM_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


# Tests write only into temporary folders: HOME and the caches (task downloads, matplotlib,
# the browser's profile) point into one made for the session, which subprocesses inherit too.
_SESSION_HOME: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _SESSION_HOME
    if _SESSION_HOME is not None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    _SESSION_HOME = Path(tempfile.mkdtemp(prefix="swarm-tests-home-"))
    os.environ["HOME"] = str(_SESSION_HOME)
    os.environ["XDG_CACHE_HOME"] = str(_SESSION_HOME / ".cache")
    os.environ["XDG_CONFIG_HOME"] = str(_SESSION_HOME / ".config")
    os.environ["SWARM_CACHE_DIR"] = str(_SESSION_HOME / ".cache" / "swarm")
    os.environ["MPLCONFIGDIR"] = str(_SESSION_HOME / ".config" / "matplotlib")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests that use the Docker engine run one after another, on one xdist worker: they
    build the same images (a debootstrap base, `swarm:local`) when a machine has none."""
    for item in items:
        if item.get_closest_marker("docker") is not None:
            item.add_marker(pytest.mark.xdist_group("docker"))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SESSION_HOME is not None:
        shutil.rmtree(_SESSION_HOME, ignore_errors=True)


class FakeClock:
    """A clock the test moves by hand (leases, heartbeats)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """PostgreSQL must be reachable: an unreachable server fails the run, it never skips."""
    engine = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            # In `public`, once: else the first test's create_schema() would install pg_trgm in
            # its own schema, and dropping that schema would take the extension from the others.
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public"))
    except Exception as exc:  # pragma: no cover - only when the server is down
        pytest.fail(f"PostgreSQL at {POSTGRES_URL} is unreachable: {exc}")
    finally:
        engine.dispose()
    return POSTGRES_URL


@pytest.fixture
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """A URL whose search_path is a fresh schema, dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in postgres_admin_url else "?"
    yield f"{postgres_admin_url}{sep}options=-csearch_path%3D{schema},public"
    with admin.connect() as conn:
        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'hub.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    database.create_schema()
    yield database
    database.dispose()


def make_runtime(
    db: Database, tmp_path: Path, clock: Callable[[], float] | None = None, **settings: object
) -> Runtime:
    values: dict[str, object] = {"run_dir": tmp_path / "run", "database_url": db.url}
    values.update(settings)
    return build_runtime(Settings(**values), db=db, clock=clock or time.time)  # type: ignore[arg-type]


@pytest.fixture
def runtime(db: Database, tmp_path: Path) -> Runtime:
    return make_runtime(db, tmp_path)


@pytest.fixture
def hub(runtime: Runtime) -> Iterator[BackgroundHub]:
    with BackgroundHub(runtime) as server:
        yield server


@pytest.fixture
def new_worker(hub: BackgroundHub) -> Iterator[Callable[[], HubClient]]:
    """Registers a worker with the hub and answers a client that acts as it."""
    clients: list[HubClient] = []

    def make() -> HubClient:
        with HubClient(hub.url, hub.runtime.operator_token) as operator:
            token = operator.register()["token"]
        client = HubClient(hub.url, token)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def operator(hub: BackgroundHub) -> Iterator[HubClient]:
    with HubClient(hub.url, hub.runtime.operator_token) as client:
        yield client
