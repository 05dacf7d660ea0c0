"""Every workspace adapter passes the same contract (embedded, Gitea stand-in, live)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contract.harness import WORKSPACE_ADAPTERS
from contract.workspace import WORKSPACE_CONTRACT, WorkspaceHarness

ADAPTERS = [
    pytest.param(name, marks=[pytest.mark.live] if name.endswith("-live") else [])
    for name in WORKSPACE_ADAPTERS
]


@pytest.fixture(params=ADAPTERS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorkspaceHarness]:
    built = WORKSPACE_ADAPTERS[request.param](tmp_path)
    yield built
    for undo in built.cleanup:
        undo()


@pytest.mark.parametrize("check", WORKSPACE_CONTRACT, ids=lambda f: f.__name__)
def test_workspace_contract(
    harness: WorkspaceHarness, check: Callable[[WorkspaceHarness], None]
) -> None:
    check(harness)
