"""Model mixes are assigned deterministically by worker id, close to their shares."""

from __future__ import annotations

from collections import Counter

import pytest

from swarm.errors import InvalidInput
from swarm.worker.models import parse_mix, pick_model


def test_no_mix_means_the_single_model() -> None:
    assert pick_model("openai/gpt-4.1-mini", None, 7) == "openai/gpt-4.1-mini"


@pytest.mark.parametrize("workers", [8, 64, 1024])
def test_shares_hold_for_any_team_size(workers: int) -> None:
    counts = Counter(pick_model(None, "strong:1,cheap:3", i) for i in range(1, workers + 1))
    assert abs(counts["strong"] - workers / 4) <= 2
    assert pick_model(None, "strong:1,cheap:3", 5) == pick_model(None, "strong:1,cheap:3", 5)


@pytest.mark.parametrize("mix", ["strong", "strong:0", "strong:x,cheap:1", ":1"])
def test_bad_mixes_are_refused(mix: str) -> None:
    with pytest.raises(InvalidInput, match="MODEL:SHARE"):
        parse_mix(mix)
