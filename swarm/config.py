"""Settings, read once from the environment (prefix `SWARM_`) and validated at start-up."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
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
    max_workers: int | None = Field(
        default=None,
        ge=1,
        description="Workers the join token may register in all (None: no limit).",
    )
    workspace: Literal["local", "gitea"] = "local"
    messages: Literal["local", "mattermost"] = "local"
    host: str = "127.0.0.1"
    port: int = 8765
    public_url: str | None = Field(
        default=None,
        description="The hub's URL as workers reach it (e.g. http://hub:8765 in compose), for "
        "the clone URLs it hands out; default http://<host>:<port>.",
    )
    claim_lease_seconds: float = Field(default=300.0, gt=0, le=86400)
    delivery_cap: int = Field(default=8, ge=0, le=100, description="Peer entries shown per answer.")
    body_limit: int = Field(default=8000, ge=100, le=1_000_000)
    message_limit: int = Field(default=4000, ge=100, le=1_000_000)
    required_approvals: int = Field(default=0, ge=0, le=16)
    without: str = Field(
        default="",
        description="Mechanisms the run is without, comma separated (swarm.switches): context, "
        "claims, dms, channel, grep, reviews. The hub refuses their calls.",
    )
    merge_check: str | None = Field(
        default=None, description="Shell command run on the merged tree."
    )
    sandbox: str | None = Field(
        default=None,
        description="The sandbox backend the merge check runs in (bwrap, docker, none); "
        "default: bwrap on Linux (docs/security.md).",
    )
    heartbeat_timeout_seconds: float = Field(default=60.0, gt=0)
    dead_after: float = Field(
        default=30.0,
        gt=0,
        description="Seconds without a heartbeat after which a worker is dead: its claims end.",
    )
    allowed_hosts: str = Field(
        default="",
        description="Comma-separated host names (besides localhost and `host`) under which the "
        "dashboard opens without a token to loopback clients, e.g. behind a local proxy.",
    )
    # Limits (docs/security.md, "The hub's rules"): defaults that fit a run of 1,024 workers.
    max_body_bytes: int = Field(
        default=1_048_576, ge=16_384, description="Largest request body, refused unread."
    )
    status_limit_bytes: int = Field(
        default=4096, ge=256, le=1_048_576, description="Largest `status` a worker reports."
    )
    git_max_push_bytes: int = Field(
        default=64 * 1024**2, ge=1024**2, description="Largest pack one push may send."
    )
    git_max_blob_bytes: int = Field(
        default=5 * 1024**2, ge=1024, description="Largest file (blob) a push may add."
    )
    git_max_refs_per_worker: int = Field(
        default=100, ge=1, description="Branches one worker may keep."
    )
    git_repo_quota_bytes: int = Field(
        default=4 * 1024**3,
        ge=1024**2,
        description="Pushes are refused once the repository is this large.",
    )
    rate_grep_per_minute: float = Field(default=120, ge=0, description="Per worker; 0: no limit.")
    rate_feed_per_minute: float = Field(default=120, ge=0, description="Per worker; 0: no limit.")
    rate_git_per_minute: float = Field(default=60, ge=0, description="Per worker; 0: no limit.")
    rate_burst: int = Field(default=10, ge=1, description="Calls a worker may make at once.")
    # The oracle (POST /v1/oracle, `sw oracle`): the task's original program, run by the hub.
    rate_oracle_per_minute: float = Field(default=60, ge=0, description="Per worker; 0: no limit.")
    oracle_sandbox: Literal["bwrap", "none"] = Field(
        default="bwrap", description="Where the oracle runs; `none` only for a trusted oracle."
    )
    oracle_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    oracle_max_input_bytes: int = Field(
        default=256 * 1024, ge=1024, description="Standard input and files of one call."
    )
    oracle_max_output_bytes: int = Field(
        default=1024 * 1024, ge=1024, description="Each of stdout and stderr; past it, stopped."
    )
    oracle_max_args: int = Field(default=256, ge=1, le=65536)
    oracle_max_arg_bytes: int = Field(default=64 * 1024, ge=256, description="All arguments.")
    oracle_max_files: int = Field(default=16, ge=0, le=1024)
    oracle_concurrency: int = Field(
        default=4, ge=1, description="Oracle runs at once, for all workers together."
    )

    @field_validator("without")
    @classmethod
    def _known_switches(cls, value: str) -> str:
        from swarm.errors import InvalidInput
        from swarm.switches import parse_without

        try:
            return ",".join(parse_without(value))
        except InvalidInput as exc:
            raise ValueError(exc.message) from None

    @model_validator(mode="after")
    def _reviews_needed(self) -> Settings:
        if self.required_approvals and "reviews" in self.switches:
            raise ValueError(
                f"SWARM_REQUIRED_APPROVALS={self.required_approvals} needs reviews, but "
                "SWARM_WITHOUT turns them off; drop one of the two"
            )
        return self

    @property
    def switches(self) -> tuple[str, ...]:
        """The mechanisms this run is without, sorted."""
        return tuple(n for n in self.without.split(",") if n)

    def allowed_host_names(self) -> set[str]:
        return {h.strip().lower() for h in self.allowed_hosts.split(",") if h.strip()}

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
