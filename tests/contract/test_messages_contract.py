"""Every messages adapter passes the same contract (embedded, Mattermost stand-in, live)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contract.harness import MESSAGES_ADAPTERS
from contract.messages import MESSAGES_CONTRACT, MessagesHarness

ADAPTERS = [
    pytest.param(name, marks=[pytest.mark.live] if name.endswith("-live") else [])
    for name in MESSAGES_ADAPTERS
]


@pytest.fixture(params=ADAPTERS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MessagesHarness]:
    built = MESSAGES_ADAPTERS[request.param](tmp_path)
    yield built
    for undo in built.cleanup:
        undo()


@pytest.mark.parametrize("check", MESSAGES_CONTRACT, ids=lambda f: f.__name__)
def test_messages_contract(
    harness: MessagesHarness, check: Callable[[MessagesHarness], None]
) -> None:
    check(harness)
