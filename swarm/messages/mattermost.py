"""Messages on a self-hosted Mattermost: one team, a `tasks` channel, DMs; workers are bots.

Per-worker cursors and bot tokens live in the hub's database (tables below, on `swarm.db.metadata`;
`Database.create_schema()` must import this module so `create_all` builds them). On SQLite they live
in a file of their own beside the hub's (see `own_database`).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from mattermostautodriver import TypedDriver
from mattermostautodriver.exceptions import (
    InvalidMattermostError,
    MattermostError,
    ResourceNotFound,
)
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy import BigInteger, Column, Integer, String, Table, Text, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError

from swarm.config import Settings
from swarm.db import Database, metadata
from swarm.errors import Forbidden, InvalidInput, NotFound, SwarmError, Unauthorized, Unavailable
from swarm.messages.ports import TASKS_CHANNEL, ChannelDigest, Message, check_body
from swarm.registry import Worker

CHANNEL_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_")
AUTHOR_PROP = "swarm_author"  # who an admin-account post speaks for: "hub" or "operator"

mattermost_accounts = Table(
    "mattermost_accounts",
    metadata,
    Column("worker", String(64), primary_key=True),
    Column("user_id", String(26), nullable=False),
    Column("token", Text, nullable=False),  # the bot's personal access token
)

mattermost_cursors = Table(
    "mattermost_cursors",
    metadata,
    Column("worker", String(64), primary_key=True),
    Column("stream", String(16), primary_key=True),  # "direct" or "channel"
    Column("at", BigInteger, nullable=False),  # create_at (ms) of the newest post handed out
    Column("seen", Text, nullable=False),  # {post_id: create_at} handed out within the lag window
    Column("version", Integer, nullable=False),  # compare-and-swap guard
)


def own_database(db: Database) -> Database:
    """Where the adapter keeps its tables. The hub takes DMs (`take_direct`, which may move a
    cursor or store a new bot) inside its own write transaction; on SQLite a second write on the
    same file would wait for that transaction forever (writes are serialized in-process), so
    there the adapter uses a sibling file (`hub.db` -> `hub-mattermost.db`). PostgreSQL runs
    the two transactions side by side on different rows: the hub's database is used."""
    url = make_url(db.url)
    if not db.is_sqlite or not url.database or url.database == ":memory:":
        return db
    path = Path(url.database)
    sibling = url.set(database=str(path.with_name(f"{path.stem}-mattermost{path.suffix}")))
    own = Database(sibling.render_as_string(hide_password=False))
    metadata.create_all(own.engine, tables=[mattermost_accounts, mattermost_cursors])
    return own


def message_id(post: dict[str, Any]) -> int:
    """An integer id in time order: create_at (ms) * 1000 + a hash of the post id."""
    return int(post["create_at"]) * 1000 + zlib.crc32(post["id"].encode()) % 1000


@contextmanager
def _translated() -> Iterator[None]:
    """Mattermost and transport errors become swarm errors at this boundary."""
    try:
        yield
    except MattermostError as exc:
        status = int(getattr(exc, "status_code", 0) or 0) or {
            "InvalidOrMissingParameters": 400,
            "NoAccessTokenProvided": 401,
            "NotEnoughPermissions": 403,
            "ResourceNotFound": 404,
        }.get(type(exc).__name__, 500)
        kind: type[SwarmError] = {
            400: InvalidInput, 401: Unauthorized, 403: Forbidden, 404: NotFound, 413: InvalidInput,
        }.get(status, Unavailable)  # fmt: skip
        raise kind(f"Mattermost answered {status}: {exc}") from exc
    except (InvalidMattermostError, httpx.HTTPError) as exc:
        raise Unavailable(f"cannot talk to Mattermost: {exc}") from exc


class MattermostMessages:
    """Implements `swarm.messages.ports.Messages` over Mattermost's REST API (v4)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        db: Database,
        *,
        team: str = "swarm",
        transport: httpx.BaseTransport | None = None,
        size_limit: int = 4000,
        lag_seconds: float = 10.0,
    ) -> None:
        url = urlsplit(base_url)
        self._options: dict[str, Any] = {
            "scheme": url.scheme or "http",
            "url": url.hostname or "localhost",
            "port": url.port or (443 if url.scheme == "https" else 80),
            "transport": transport or httpx.HTTPTransport(retries=2),  # one pool for all drivers
            "request_timeout": 30,
        }
        self.db = own_database(db)
        self.team_name = team
        self.size_limit = size_limit
        self.lag_ms = int(lag_seconds * 1000)
        self.admin = self._driver(token)
        self._drivers: dict[str, TypedDriver] = {}
        self._names: dict[str, str] = {}  # user id -> username
        self._channels: dict[str, str] = {}  # channel name -> id
        self._directs: dict[tuple[str, str], str] = {}
        self._members: set[tuple[str, str]] = set()
        with _translated():
            me = self.admin.users.get_user("me")
            self.admin_id = str(me["id"])
            self.team_id = str(self.admin.teams.get_team_by_name(team)["id"])

    def _driver(self, token: str) -> TypedDriver:
        driver = TypedDriver({**self._options, "token": token, "max_retries": 2})
        driver.client.token = token  # what login() would do, without its extra round trip
        return driver

    # --- accounts and channels ---

    def account(self, worker: Worker) -> tuple[str, TypedDriver]:
        """The worker's bot (user id, driver), created with a token on first use."""
        driver = self._drivers.get(worker.name)
        if driver is None:
            with self.db.read() as conn:
                row = conn.execute(
                    select(mattermost_accounts).where(mattermost_accounts.c.worker == worker.name)
                ).first()
            user_id, token = (row.user_id, row.token) if row else self._create_bot(worker.name)
            driver = self._driver(token)
            driver.client.userid = user_id
            self._drivers[worker.name] = driver
            self._names[user_id] = worker.name
        return str(driver.client.userid), driver

    def _create_bot(self, name: str) -> tuple[str, str]:
        with _translated():
            try:
                user_id = str(self.admin.users.get_user_by_username(name)["id"])
            except ResourceNotFound:
                user_id = ""
            if not user_id:
                bot = self.admin.bots.create_bot(name, display_name=f"swarm {name}")
                user_id = str(bot["user_id"])
            token = str(self.admin.users.create_user_access_token(user_id, "swarm worker")["token"])
            self.admin.teams.add_team_member(self.team_id, user_id=user_id)
        try:
            with self.db.write() as conn:
                conn.execute(
                    insert(mattermost_accounts).values(worker=name, user_id=user_id, token=token)
                )
        except IntegrityError:  # another hub replica created it first: use theirs
            with self.db.read() as conn:
                row = conn.execute(
                    select(mattermost_accounts).where(mattermost_accounts.c.worker == name)
                ).one()
            return row.user_id, row.token
        return user_id, token

    def channel_id(self, name: str) -> str:
        """The team channel's id, creating a public channel on first use."""
        if name not in self._channels:
            with _translated():
                try:
                    found = self.admin.channels.get_channel_by_name(self.team_id, name)
                except ResourceNotFound:
                    found = self.admin.channels.create_channel(self.team_id, name, name, "O")
            self._channels[name] = str(found["id"])
        return self._channels[name]

    def _join(self, channel_id: str, user_id: str) -> None:
        if (channel_id, user_id) not in self._members:
            with _translated():
                self.admin.channels.add_channel_member(channel_id, user_id=user_id)
            self._members.add((channel_id, user_id))

    def _name(self, user_id: str) -> str:
        if user_id not in self._names:
            with _translated():
                self._names[user_id] = str(self.admin.users.get_user(user_id)["username"])
        return self._names[user_id]

    # --- the port ---

    def _check(self, body: object) -> str:
        return check_body(body, self.size_limit)

    def _send(self, author: Worker | str, channel_id: str, body: str) -> dict[str, Any]:
        with _translated():
            if isinstance(author, Worker):
                user_id, driver = self.account(author)
                if channel_id in self._channels.values():
                    self._join(channel_id, user_id)
                return dict(driver.posts.create_post(channel_id, body))
            props = {AUTHOR_PROP: author}
            return dict(self.admin.posts.create_post(channel_id, body, props=props))

    def post(self, author: Worker | str, body: str, channel: str = TASKS_CHANNEL) -> Message:
        if not channel or set(channel) - CHANNEL_NAME_CHARS:
            raise InvalidInput(f"bad channel name {channel!r}: use lower-case letters, digits, '-'")
        body = self._check(body)
        raw = self._send(author, self.channel_id(channel), body)
        return self._message(raw, channel=channel)

    def direct(self, author: Worker | str, recipient: Worker, body: str) -> Message:
        if isinstance(author, Worker) and author.id == recipient.id:
            raise InvalidInput("a direct message to yourself; write a context entry instead")
        body = self._check(body)
        sender = self.account(author)[0] if isinstance(author, Worker) else self.admin_id
        to = self.account(recipient)[0]
        key = (min(sender, to), max(sender, to))
        if key not in self._directs:
            with _translated():
                self._directs[key] = str(self.admin.channels.create_direct_channel(list(key))["id"])
        raw = self._send(author, self._directs[key], body)
        return self._message(raw, recipient=recipient.name)

    def take_direct(self, worker: Worker) -> list[Message]:
        user_id, _driver = self.account(worker)
        with _translated():
            mine = self.admin.channels.get_channels_for_team_for_user(user_id, self.team_id)
        channels = {c["id"]: c for c in mine if c.get("type") == "D"}
        taken, _more = self._take(worker, "direct", channels, user_id, 1000)
        return [self._message(p, recipient=worker.name) for p in taken]

    def take_channel(self, worker: Worker, limit: int = 50) -> ChannelDigest:
        user_id, _driver = self.account(worker)
        channels = {c["id"]: c for c in self._team_channels()}
        taken, more = self._take(worker, "channel", channels, user_id, limit)
        names = {cid: c["name"] for cid, c in channels.items()}
        return ChannelDigest(
            tuple(self._message(p, channel=names[p["channel_id"]]) for p in taken), more
        )

    def _team_channels(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        with _translated():
            for page in range(100):
                batch = self.admin.channels.get_public_channels_for_team(
                    self.team_id, page=page, per_page=200
                )
                found += batch
                if len(batch) < 200:
                    break
        for c in found:
            self._channels.setdefault(c["name"], c["id"])
        return found

    def _posts_since(self, channel_id: str, since: int) -> list[dict[str, Any]]:
        with _translated():
            # `since` selects posts updated strictly after it on real servers
            listing = self.admin.posts.get_posts_for_channel(channel_id, since=max(since - 1, 1))
        posts = (listing.get("posts") or {}).values()
        return [p for p in posts if not p.get("delete_at") and not p.get("type")]

    def _take(
        self, worker: Worker, stream: str, channels: dict[str, Any], user_id: str, limit: int
    ) -> tuple[list[dict[str, Any]], int]:
        """Posts by others in `channels` not handed to `worker` yet; the cursor moves by CAS."""
        while True:
            at, seen, version = self._cursor(worker.name, stream)
            floor = at - self.lag_ms  # posts may become visible slightly out of create_at order
            fresh = [
                p
                for cid, c in channels.items()
                if int(c.get("last_post_at") or 0) >= floor
                for p in self._posts_since(cid, floor)
                if p["create_at"] >= floor and p["id"] not in seen and p["user_id"] != user_id
            ]
            fresh.sort(key=lambda p: (p["create_at"], p["id"]))
            taken, more = fresh[:limit], max(0, len(fresh) - limit)
            if not taken:
                return [], 0
            new_at = max(at, taken[-1]["create_at"])
            seen.update({p["id"]: p["create_at"] for p in taken})
            kept = {k: v for k, v in seen.items() if v >= new_at - self.lag_ms}
            if self._advance(worker.name, stream, version, new_at, kept):
                return taken, more

    def _cursor(self, worker: str, stream: str) -> tuple[int, dict[str, int], int]:
        with self.db.read() as conn:
            row = conn.execute(
                select(mattermost_cursors).where(
                    mattermost_cursors.c.worker == worker, mattermost_cursors.c.stream == stream
                )
            ).first()
        if row is None:
            return 0, {}, 0
        return int(row.at), json.loads(row.seen), int(row.version)

    def _advance(
        self, worker: str, stream: str, version: int, at: int, seen: dict[str, int]
    ) -> bool:
        values = {"at": at, "seen": json.dumps(seen), "version": version + 1}
        try:
            with self.db.write() as conn:
                if version == 0:
                    conn.execute(
                        insert(mattermost_cursors).values(worker=worker, stream=stream, **values)
                    )
                    return True
                moved = conn.execute(
                    update(mattermost_cursors)
                    .where(
                        mattermost_cursors.c.worker == worker,
                        mattermost_cursors.c.stream == stream,
                        mattermost_cursors.c.version == version,
                    )
                    .values(values)
                )
                return moved.rowcount == 1
        except IntegrityError:
            return False  # a concurrent call of this worker took them first

    def history(
        self,
        *,
        channel: str | None = None,
        worker: Worker | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> list[Message]:
        since = after_id // 1000
        found: list[Message] = []
        if channel is not None or worker is None:
            names = [channel] if channel else [c["name"] for c in self._team_channels()]
            for name in names:
                found += [
                    self._message(p, channel=name)
                    for p in self._posts_since(self.channel_id(name), since)
                ]
        if worker is not None and channel is None:
            user_id = self.account(worker)[0]
            with _translated():
                mine = self.admin.channels.get_channels_for_team_for_user(user_id, self.team_id)
            for c in (c for c in mine if c.get("type") == "D"):
                peer = next((u for u in c["name"].split("__") if u != user_id), user_id)
                for p in self._posts_since(c["id"], since):
                    to = worker.name if p["user_id"] != user_id else self._name(peer)
                    found.append(self._message(p, recipient=to))
        found = [m for m in found if m.id > after_id]
        return sorted(found, key=lambda m: m.id)[: min(limit, 1000)]

    def _message(self, post: dict[str, Any], **target: str | None) -> Message:
        author = self._name(post["user_id"])
        if post["user_id"] == self.admin_id:
            author = str((post.get("props") or {}).get(AUTHOR_PROP) or author)
        return Message(
            message_id(post),
            post["create_at"] / 1000,
            author,
            post["message"],
            target.get("channel"),
            target.get("recipient"),
        )


class MattermostSettings(BaseSettings):
    """`SWARM_MATTERMOST_*`: where Mattermost is and the admin token the hub acts with."""

    model_config = SettingsConfigDict(env_prefix="SWARM_MATTERMOST_", extra="ignore")

    url: str
    token: str = Field(min_length=12)
    team: str = "swarm"


def from_settings(settings: Settings, db: Database) -> MattermostMessages:
    """The composition root's factory: `SWARM_MESSAGES=mattermost` plus `SWARM_MATTERMOST_*`."""
    mm = MattermostSettings()  # type: ignore[call-arg]
    # Idempotent: the hub works even when create_schema() did not import this module.
    metadata.create_all(db.engine, tables=[mattermost_accounts, mattermost_cursors])
    return MattermostMessages(mm.url, mm.token, db, team=mm.team, size_limit=settings.message_limit)
