"""The composition root: builds the hub's runtime from settings; every adapter can be overridden."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarm.config import Settings
from swarm.context import ContextStore
from swarm.db import Database
from swarm.delivery import Deliverer
from swarm.messages.ports import Messages
from swarm.registry import Registry
from swarm.runstate import RunState
from swarm.workspace.ports import Workspace


@dataclass
class Runtime:
    settings: Settings
    db: Database
    registry: Registry
    context: ContextStore
    messages: Messages
    workspace: Workspace | None
    operator_token: str
    join_token: str
    deliverer: Deliverer
    run: RunState
    clock: Callable[[], float] = time.time
    extras: dict[str, Any] = field(default_factory=dict)  # adapter-specific objects (git router)

    def close(self) -> None:
        closer = getattr(self.workspace, "shutdown", None)
        if callable(closer):
            closer()
        self.db.dispose()


def read_or_create_token(path: Path) -> str:
    """A secret kept in a file readable only by its owner, created on first use."""
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    token = "swo_" + secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token


def build_runtime(
    settings: Settings | None = None,
    *,
    db: Database | None = None,
    messages: Messages | None = None,
    workspace: Workspace | None = None,
    clock: Callable[[], float] = time.time,
    create_schema: bool = True,
) -> Runtime:
    settings = settings or Settings()
    db = db or Database(settings.resolved_database_url())
    if create_schema:
        db.create_schema()
    operator_token = settings.operator_token or read_or_create_token(
        settings.run_dir / "operator.token"
    )
    registry = Registry(db, clock=clock)
    context = ContextStore(
        db,
        clock=clock,
        lease_seconds=settings.claim_lease_seconds,
        body_limit=settings.body_limit,
    )
    if messages is None:
        messages = _build_messages(settings, db, clock)
    if workspace is None:
        workspace = _build_workspace(settings, db, clock)
    from swarm.messages.local import LocalMessages

    deliverer = Deliverer(
        db,
        settings.delivery_cap,
        with_messages=isinstance(messages, LocalMessages),
        entries="context" not in settings.switches,
        dms="dms" not in settings.switches,
    )
    return Runtime(
        settings=settings,
        db=db,
        registry=registry,
        context=context,
        messages=messages,
        workspace=workspace,
        operator_token=operator_token,
        join_token=settings.join_token or operator_token,
        deliverer=deliverer,
        run=RunState(db, clock=clock),
        clock=clock,
    )


def _build_messages(settings: Settings, db: Database, clock: Callable[[], float]) -> Messages:
    if settings.messages == "mattermost":
        from swarm.messages import mattermost

        return mattermost.from_settings(settings, db)
    from swarm.messages.local import LocalMessages

    return LocalMessages(db, clock=clock, size_limit=settings.message_limit)


def _build_workspace(
    settings: Settings, db: Database, clock: Callable[[], float]
) -> Workspace | None:
    if settings.workspace == "gitea":
        from swarm.workspace import gitea

        return gitea.from_settings(settings, db)
    try:
        from swarm.workspace import local
    except ImportError:
        return None
    factory = getattr(local, "from_settings", None)
    if factory is None:
        return None
    return factory(settings, db, clock)  # type: ignore[no-any-return]
