"""Settings, read once from the environment (prefix `SWARM_`) and validated at start-up."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PLACEHOLDER_SECRETS = {"changeme", "change-me", "secret", "password", "token", "xxx"}


class Settings(BaseSettings):
    """Everything the hub and the runtime need to start; each field can be set as `SWARM_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="SWARM_", extra="ignore")

    run_dir: Path = Field(default=Path("runs/default"), description="Where a run keeps its files.")
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL; default: SQLite (WAL) at <run_dir>/hub.db. "
        "PostgreSQL: postgresql+psycopg://user@host:5432/db",
    )
    operator_token: str | None = Field(
        default=None, description="Administration token; generated into <run_dir>/operator.token."
    )
    join_token: str | None = Field(
        default=None,
        description="Token that lets a worker register; defaults to the operator token.",
    )
    workspace: Literal["local", "gitea"] = "local"
    messages: Literal["local", "mattermost"] = "local"
    host: str = "127.0.0.1"
    port: int = 8765
    claim_lease_seconds: float = Field(default=300.0, gt=0, le=86400)
    delivery_cap: int = Field(default=8, ge=0, le=100, description="Peer entries shown per answer.")
    body_limit: int = Field(default=8000, ge=100, le=1_000_000)
    message_limit: int = Field(default=4000, ge=100, le=1_000_000)
    required_approvals: int = Field(default=0, ge=0, le=16)
    merge_check: str | None = Field(
        default=None, description="Shell command run on the merged tree."
    )
    heartbeat_timeout_seconds: float = Field(default=60.0, gt=0)

    @field_validator("operator_token", "join_token")
    @classmethod
    def _refuse_placeholders(cls, value: str | None) -> str | None:
        if value is not None and (value.lower() in PLACEHOLDER_SECRETS or len(value) < 12):
            raise ValueError(
                "is a placeholder or shorter than 12 characters; set a real secret "
                "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(24))'`)"
            )
        return value

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.run_dir / 'hub.db').resolve()}"
