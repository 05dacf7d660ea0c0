"""The workspace: one git repository, a branch and pull request per piece of work."""

from swarm.workspace.ports import (
    MAIN,
    PRState,
    PullRequest,
    PullRequestDetail,
    Review,
    Verdict,
    Workspace,
)

__all__ = [
    "MAIN",
    "PRState",
    "PullRequest",
    "PullRequestDetail",
    "Review",
    "Verdict",
    "Workspace",
]
