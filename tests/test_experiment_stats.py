"""The experiment's statistics against known inputs: the bootstrap interval of a mean against
the exact bootstrap distribution (every resample enumerated), and paired differences."""

from __future__ import annotations

import itertools
import statistics

import numpy as np
import pytest

from swarm.experiment.stats import Interval, bootstrap_mean, difference

DATA = [0.0, 1.0, 2.0, 10.0]


def exact_bootstrap_quantiles(data: list[float], level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of the exact bootstrap distribution: the means of all n^n
    equally likely resamples with replacement."""
    means = [statistics.fmean(r) for r in itertools.product(data, repeat=len(data))]
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def test_the_bootstrap_interval_of_a_mean_matches_the_exact_bootstrap_distribution() -> None:
    found = bootstrap_mean(DATA)
    assert found is not None
    assert found.mean == pytest.approx(3.25)  # (0 + 1 + 2 + 10) / 4
    assert found.n == 4
    low, high = exact_bootstrap_quantiles(DATA)  # of the 256 resamples
    assert (low, high) == (0.5, 7.75)
    # 10,000 resamples land on the exact quantile or a neighbouring mean (steps of 0.25).
    assert found.low == pytest.approx(low, abs=0.25)
    assert found.high == pytest.approx(high, abs=0.25)
    assert found.excludes_zero  # 0.5 > 0
    assert bootstrap_mean(DATA) == found  # a fixed RNG seed: the same report every time


def test_degenerate_inputs_give_no_interval_rather_than_a_false_one() -> None:
    assert bootstrap_mean([]) is None
    assert bootstrap_mean([None, None]) is None  # a measure no run could tell
    single = bootstrap_mean([4.0, None])
    assert single == Interval(4.0, None, None, 1)
    assert not single.excludes_zero
    assert single.text() == "4.0 (n=1)"
    same = bootstrap_mean([2.0, 2.0, 2.0])
    assert same is not None and (same.low, same.high) == (2.0, 2.0)


def test_a_paired_difference_is_the_bootstrap_of_the_differences_by_task_and_seed() -> None:
    config = {("t", 1): 10.0, ("t", 2): 12.0, ("t", 3): 15.0, ("t", 4): 99.0}
    baseline = {("t", 1): 9.0, ("t", 2): 10.0, ("t", 3): 11.0}  # no seed 4: left out
    found = difference(config, baseline)
    assert found is not None and found.paired
    assert found.n == 3
    assert found.mean == pytest.approx(7 / 3)  # differences 1, 2, 4
    assert found == bootstrap_mean([1.0, 2.0, 4.0])
    assert 1.0 <= found.low <= found.mean <= found.high <= 4.0  # type: ignore[operator]


def test_pairing_removes_the_seed_to_seed_variance() -> None:
    """A configuration 5 slower on every seed, on seeds that differ a lot: paired, the
    interval is exactly 5; the same numbers unpaired cannot tell it from 0."""
    baseline = {("t", s): v for s, v in enumerate([10.0, 100.0, 40.0, 250.0, 70.0])}
    config = {k: v + 5.0 for k, v in baseline.items()}
    paired = difference(config, baseline)
    assert paired is not None and paired.paired
    assert (paired.mean, paired.low, paired.high) == (5.0, 5.0, 5.0)
    assert paired.excludes_zero
    shifted = {("other", k[1]): v for k, v in config.items()}  # no (task, seed) in common
    unpaired = difference(shifted, baseline)
    assert unpaired is not None and not unpaired.paired
    assert unpaired.mean == pytest.approx(5.0)
    assert unpaired.low < 0 < unpaired.high  # type: ignore[operator]
    assert not unpaired.excludes_zero


def test_a_difference_with_a_missing_side_is_not_invented() -> None:
    assert difference({("t", 1): None}, {("t", 1): 3.0}) is None
    assert difference({}, {("t", 1): 3.0}) is None
    one = difference({("a", 1): 4.0}, {("b", 1): 1.0})
    assert one is not None and one.mean == 3.0 and one.low is None


def test_interval_text_scales_and_marks() -> None:
    found = Interval(0.5, 0.25, 0.75, 3)
    assert found.text(1, 100.0) == "50.0 [25.0, 75.0]"
    assert found.excludes_zero
    assert not Interval(0.5, -0.1, 0.75, 3).excludes_zero
