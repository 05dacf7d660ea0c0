"""The project's own exceptions; adapters translate backend errors into these at the boundary."""

from __future__ import annotations


class SwarmError(Exception):
    """Every error swarm raises on purpose; `status` is the HTTP answer the hub gives for it."""

    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(SwarmError):
    """The request was malformed; nothing was changed."""

    status = 422


class NotFound(SwarmError):
    status = 404


class Unauthorized(SwarmError):
    status = 401


class Forbidden(SwarmError):
    status = 403


class Conflict(SwarmError):
    """The request is valid but the current state refuses it (e.g. a merged PR cannot be merged)."""

    status = 409


class MergeConflict(Conflict):
    """A merge into `main` would conflict; `files` names the conflicting paths."""

    def __init__(self, message: str, files: list[str]) -> None:
        super().__init__(message)
        self.files = files


class CheckFailed(Conflict):
    """The run's merge check command failed on the merged tree; `main` did not move."""

    def __init__(self, message: str, output: str) -> None:
        super().__init__(message)
        self.output = output


class RateLimited(SwarmError):
    """Too many calls of one kind from one worker; `retry_after` seconds until the next may go."""

    status = 429

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Unavailable(SwarmError):
    """A backing service (database, git, a server) could not be reached."""

    status = 503


class StorageFull(SwarmError):
    """A write failed because the disk it goes to is full; nothing was changed. Clients retry
    (a 5xx), so the work goes on by itself once space returns."""

    status = 507


# PostgreSQL text cannot hold NUL: refused on both engines, so a text means the same on both.
NUL_REFUSED = "{what} contains a NUL character (\\x00); text cannot hold it: remove it"
