"""The stand-ins as the servers of a compose stack (scripts/compose-check): `python -m
standins.container gitea|mattermost` serves one on 0.0.0.0 with what a real server's container
has and the in-process stand-ins leave to the test: Gitea's health route and Mattermost's
password login of the first administrator. `/standin/state` shows what the check asserts on
(PR authors and merges; bots, channels and posts), to the check only: it is never published."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from standins.gitea import GiteaStandin
from standins.mattermost import MattermostStandin


def gitea_app() -> Starlette:
    gitea = GiteaStandin(
        Path(os.environ.get("STANDIN_DATA", "/data")),
        admin_token=os.environ["STANDIN_ADMIN_TOKEN"],
        admin_password=os.environ["GITEA_ADMIN_PASSWORD"],
    )

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "pass"})

    async def state(_request: Request) -> Response:
        with gitea.lock:
            pulls = {
                key: [
                    {
                        "number": p.number,
                        "title": p.title,
                        "poster": p.poster,
                        "head": p.head,
                        "merged": p.merged,
                        "merged_by": p.merged_by,
                        "reviews": [r["user"]["login"] for r in p.reviews],
                    }
                    for p in prs.values()
                ]
                for key, prs in gitea.pulls.items()
            }
            heads = {key: repo.head("main") for key, repo in gitea.repos.items()}
            pushers = sorted({user for user, _repo, status in gitea.pushes if status == 200})
        return JSONResponse({"pulls": pulls, "main": heads, "pushers": pushers})

    return Starlette(
        routes=[
            Route("/api/healthz", healthz),
            Route("/standin/state", state),
            Mount("/", app=gitea.app),
        ]
    )


def mattermost_app() -> Starlette:
    admin_token = os.environ["STANDIN_ADMIN_TOKEN"]
    mm = MattermostStandin(admin_token=admin_token)
    admin = {"login_id": "admin", "password": os.environ["MATTERMOST_ADMIN_PASSWORD"]}

    async def login(request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        if {k: body.get(k) for k in admin} != admin:
            return JSONResponse({"message": "Enter a valid email or username and/or password."},
                                401)  # fmt: skip
        return JSONResponse(mm.users[mm.admin_id], headers={"Token": admin_token})

    async def state(_request: Request) -> Response:
        with mm.lock:
            names = {u["id"]: u["username"] for u in mm.users.values()}
            bots = sorted(u["username"] for u in mm.users.values() if u.get("is_bot"))
            kinds = {c["id"]: (c["type"], c["name"]) for c in mm.channels.values()}
            posts = [
                {
                    "user": names.get(p["user_id"], p["user_id"]),
                    "channel_type": kinds[p["channel_id"]][0],
                    "channel": kinds[p["channel_id"]][1],
                    "members": sorted(names.get(m, m) for m in mm.members[p["channel_id"]]),
                    "message": p["message"][:200],
                }
                for p in mm.posts.values()
            ]
        return JSONResponse({"bots": bots, "posts": posts})

    return Starlette(
        routes=[
            Route("/api/v4/users/login", login, methods=["POST"]),
            Route("/standin/state", state),
            Mount("/", app=mm.app),
        ]
    )


def main() -> None:
    which, port = sys.argv[1], int(sys.argv[2])
    app = {"gitea": gitea_app, "mattermost": mattermost_app}[which]()
    uvicorn.run(app, host="0.0.0.0", port=port, log_level="warning", lifespan="off")


if __name__ == "__main__":
    main()
