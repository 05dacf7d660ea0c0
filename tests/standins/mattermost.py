"""A stateful in-memory stand-in for Mattermost's REST API v4 (users, bots, teams, posts)."""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


def new_id() -> str:
    return secrets.token_hex(13)  # 26 characters, like Mattermost's ids


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message


class MattermostStandin:
    """In-memory Mattermost: an admin, bots with tokens, teams, channels, DMs and posts."""

    def __init__(self, admin_token: str = "mm-admin-token-0123456789") -> None:
        self.admin_id = new_id()
        self.users: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, str] = {admin_token: self.admin_id}
        self.teams: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, dict[str, Any]] = {}
        self.members: dict[str, set[str]] = {}
        self.posts: dict[str, dict[str, Any]] = {}
        self.lock = threading.RLock()
        self._clock = 0
        self._add_user(self.admin_id, "admin", roles="system_admin system_user")
        self.app = Starlette(routes=self._routes())

    # --- helpers for tests: what a person does in the UI ---

    def add_person(self, username: str) -> tuple[str, str]:
        """A human account; returns (user id, token)."""
        user_id, token = new_id(), secrets.token_hex(13)
        self._add_user(user_id, username)
        self.tokens[token] = user_id
        return user_id, token

    def ensure_team(self, name: str) -> str:
        for team in self.teams.values():
            if team["name"] == name:
                return str(team["id"])
        team_id = new_id()
        self.teams[team_id] = {"id": team_id, "name": name, "display_name": name, "type": "O"}
        return team_id

    # --- plumbing ---

    def _now(self) -> int:
        """Milliseconds, strictly increasing (two posts never share a create_at here)."""
        self._clock = max(self._clock + 1, int(time.time() * 1000))
        return self._clock

    def _add_user(self, user_id: str, username: str, roles: str = "system_user") -> None:
        self.users[user_id] = {
            "id": user_id,
            "username": username,
            "roles": roles,
            "create_at": self._now(),
            "update_at": 0,
            "delete_at": 0,
        }

    def _routes(self) -> list[Route]:
        v4 = "/api/v4"
        table = [
            ("/system/ping", "GET", self.ping),
            ("/users/{user_id}", "GET", self.get_user),
            ("/users/username/{username}", "GET", self.get_user_by_name),
            ("/bots", "POST", self.create_bot),
            ("/users/{user_id}/tokens", "POST", self.create_token),
            ("/teams", "POST", self.create_team),
            ("/teams/name/{name}", "GET", self.get_team_by_name),
            ("/teams/{team_id}/members", "POST", self.add_team_member),
            ("/teams/{team_id}/channels", "GET", self.team_channels),
            ("/teams/{team_id}/channels/name/{name}", "GET", self.channel_by_name),
            ("/channels", "POST", self.create_channel),
            ("/channels/direct", "POST", self.create_direct),
            ("/channels/{channel_id}/members", "POST", self.add_channel_member),
            ("/channels/{channel_id}/posts", "GET", self.channel_posts),
            ("/posts", "POST", self.create_post),
            ("/users/{user_id}/teams/{team_id}/channels", "GET", self.user_channels),
        ]
        return [Route(v4 + path, self._wrap(h), methods=[m]) for path, m, h in table]

    def _wrap(self, handler: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            body = await request.json() if await request.body() else None
            try:
                token = request.headers.get("authorization", "").removeprefix("Bearer ")
                user = self.tokens.get(token)
                if user is None and handler != self.ping:
                    raise ApiError(401, "Invalid or expired session, please login again.")
                with self.lock:
                    status, payload = handler(request, user, body)
            except ApiError as exc:
                status, payload = (
                    exc.status,
                    {
                        "id": "api.standin.error",
                        "message": exc.message,
                        "request_id": new_id(),
                        "status_code": exc.status,
                    },
                )
            return JSONResponse(payload, status)

        return endpoint

    def _admin(self, user: str) -> None:
        if "system_admin" not in self.users[user]["roles"]:
            raise ApiError(403, "You do not have the appropriate permissions.")

    def _channel(self, channel_id: str) -> dict[str, Any]:
        if channel_id not in self.channels:
            raise ApiError(404, "Unable to find the channel.")
        return self.channels[channel_id]

    def _new_channel(self, team_id: str, name: str, kind: str, creator: str) -> dict[str, Any]:
        channel_id = new_id()
        now = self._now()
        channel = {
            "id": channel_id,
            "team_id": team_id,
            "name": name,
            "display_name": name,
            "type": kind,
            "create_at": now,
            "update_at": now,
            "delete_at": 0,
            "last_post_at": 0,
            "total_msg_count": 0,
            "creator_id": creator,
        }
        self.channels[channel_id] = channel
        self.members[channel_id] = set()
        return channel

    # --- endpoints ---

    def ping(self, _r: Request, _u: str | None, _b: Any) -> tuple[int, Any]:
        return 200, {"status": "OK"}

    def get_user(self, request: Request, user: str, _b: Any) -> tuple[int, Any]:
        user_id = request.path_params["user_id"]
        user_id = user if user_id == "me" else user_id
        if user_id not in self.users:
            raise ApiError(404, "Unable to find the user.")
        return 200, self.users[user_id]

    def get_user_by_name(self, request: Request, _u: str, _b: Any) -> tuple[int, Any]:
        for u in self.users.values():
            if u["username"] == request.path_params["username"]:
                return 200, u
        raise ApiError(404, "Unable to find the user.")

    def create_bot(self, _r: Request, user: str, body: Any) -> tuple[int, Any]:
        self._admin(user)
        if any(u["username"] == body["username"] for u in self.users.values()):
            raise ApiError(400, "An account with that username already exists.")
        user_id = new_id()
        self._add_user(user_id, body["username"])
        self.users[user_id]["is_bot"] = True
        bot = {"user_id": user_id, "username": body["username"], "owner_id": user}
        return 201, {**bot, "display_name": body.get("display_name", ""), "create_at": self._now()}

    def create_token(self, request: Request, user: str, body: Any) -> tuple[int, Any]:
        self._admin(user)
        user_id = request.path_params["user_id"]
        token = secrets.token_hex(13)
        self.tokens[token] = user_id
        # Real servers answer 200 although the spec documents 201 (allow-listed drift).
        made = {"id": new_id(), "token": token, "user_id": user_id}
        return 200, {**made, "description": body["description"]}

    def create_team(self, _r: Request, user: str, body: Any) -> tuple[int, Any]:
        self._admin(user)
        return 201, self.teams[self.ensure_team(body["name"])]

    def get_team_by_name(self, request: Request, _u: str, _b: Any) -> tuple[int, Any]:
        for team in self.teams.values():
            if team["name"] == request.path_params["name"]:
                return 200, team
        raise ApiError(404, "Unable to find the team.")

    def add_team_member(self, request: Request, _u: str, body: Any) -> tuple[int, Any]:
        team_id = request.path_params["team_id"]
        return 201, {"team_id": team_id, "user_id": body["user_id"], "roles": "team_user"}

    def team_channels(self, request: Request, _u: str, _b: Any) -> tuple[int, Any]:
        team_id = request.path_params["team_id"]
        query = request.query_params
        page, per_page = int(query.get("page", 0)), int(query.get("per_page", 60))
        public = [c for c in self.channels.values() if c["team_id"] == team_id and c["type"] == "O"]
        return 200, public[page * per_page : (page + 1) * per_page]

    def channel_by_name(self, request: Request, _u: str, _b: Any) -> tuple[int, Any]:
        for c in self.channels.values():
            where = (request.path_params["team_id"], request.path_params["name"])
            if (c["team_id"], c["name"]) == where:
                return 200, c
        raise ApiError(404, "Unable to find the channel.")

    def create_channel(self, _r: Request, user: str, body: Any) -> tuple[int, Any]:
        for c in self.channels.values():
            if c["team_id"] == body["team_id"] and c["name"] == body["name"]:
                raise ApiError(400, "A channel with that name already exists on the same team.")
        channel = self._new_channel(body["team_id"], body["name"], body["type"], user)
        self.members[channel["id"]].add(user)
        return 201, channel

    def create_direct(self, _r: Request, user: str, body: Any) -> tuple[int, Any]:
        a, b = sorted(body)
        if user not in (a, b):
            self._admin(user)
        name = f"{a}__{b}"
        for c in self.channels.values():
            if c["name"] == name:
                return 201, c
        channel = self._new_channel("", name, "D", user)
        self.members[channel["id"]] |= {a, b}
        return 201, channel

    def add_channel_member(self, request: Request, _u: str, body: Any) -> tuple[int, Any]:
        channel_id = request.path_params["channel_id"]
        self._channel(channel_id)
        self.members[channel_id].add(body["user_id"])
        return 201, {"channel_id": channel_id, "user_id": body["user_id"], "roles": "channel_user"}

    def create_post(self, _r: Request, user: str, body: Any) -> tuple[int, Any]:
        channel = self._channel(body["channel_id"])
        if user not in self.members[channel["id"]]:
            raise ApiError(403, "You do not have the appropriate permissions.")
        now = self._now()
        post = {
            "id": new_id(),
            "create_at": now,
            "update_at": now,
            "delete_at": 0,
            "edit_at": 0,
            "user_id": user,
            "channel_id": channel["id"],
            "root_id": "",
            "message": body["message"],
            "type": "",
            "props": body.get("props") or {},
        }
        self.posts[post["id"]] = post
        channel["last_post_at"] = now
        channel["total_msg_count"] += 1
        return 201, post

    def channel_posts(self, request: Request, user: str, _b: Any) -> tuple[int, Any]:
        channel_id = request.path_params["channel_id"]
        channel = self._channel(channel_id)
        if user not in self.members[channel_id] and channel["type"] != "O":
            self._admin(user)
        since = int(request.query_params.get("since", 0))
        posts = [p for p in self.posts.values() if p["channel_id"] == channel_id]
        posts = [p for p in posts if p["update_at"] > since] if since else posts[-60:]
        order = [p["id"] for p in sorted(posts, key=lambda p: -p["create_at"])]
        listing = {"order": order, "posts": {p["id"]: p for p in posts}}
        return 200, {**listing, "next_post_id": "", "prev_post_id": ""}

    def user_channels(self, request: Request, user: str, _b: Any) -> tuple[int, Any]:
        user_id = request.path_params["user_id"]
        if user_id != user:
            self._admin(user)
        team_id = request.path_params["team_id"]
        found = [
            c
            for c in self.channels.values()
            if user_id in self.members[c["id"]] and c["team_id"] in (team_id, "")
        ]
        return 200, found
