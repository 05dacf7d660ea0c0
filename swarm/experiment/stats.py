"""The experiment's statistics: means with percentile-bootstrap 95% intervals over repeats, and
differences against a baseline, paired by (task, seed) where both configurations have them.

The bootstrap draws from a generator with a fixed seed, so the same runs give the same report.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 10_000
LEVEL = 0.95
RNG_SEED = 20261201


@dataclass(frozen=True)
class Interval:
    """A mean and its interval; `low`/`high` are None with fewer than two values."""

    mean: float
    low: float | None
    high: float | None
    n: int
    paired: bool = True

    @property
    def excludes_zero(self) -> bool:
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)

    def text(self, digits: int = 1, scale: float = 1.0) -> str:
        f = f"{{:.{digits}f}}"
        mean = f.format(self.mean * scale)
        if self.low is None or self.high is None:
            return f"{mean} (n={self.n})"
        return f"{mean} [{f.format(self.low * scale)}, {f.format(self.high * scale)}]"


def _clean(values: Sequence[float | None]) -> np.ndarray:
    return np.array([float(v) for v in values if v is not None and np.isfinite(v)], dtype=float)


def bootstrap_mean(
    values: Sequence[float | None],
    *,
    resamples: int = RESAMPLES,
    level: float = LEVEL,
    seed: int = RNG_SEED,
) -> Interval | None:
    """The mean of `values` (None ones left out) and its percentile-bootstrap interval: the
    `level` central share of the means of `resamples` resamples with replacement."""
    data = _clean(values)
    if data.size == 0:
        return None
    mean = float(data.mean())
    if data.size == 1:
        return Interval(mean, None, None, 1)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return Interval(mean, float(low), float(high), int(data.size))


def difference(
    config: Mapping[Hashable, float | None],
    baseline: Mapping[Hashable, float | None],
    *,
    resamples: int = RESAMPLES,
    level: float = LEVEL,
    seed: int = RNG_SEED,
) -> Interval | None:
    """config − baseline. Keyed by (task, seed): with keys in common, the mean of the paired
    differences and its bootstrap interval; with none, the difference of the two means, each
    resampled on its own (unpaired)."""
    shared = [k for k in config if k in baseline and config[k] is not None
              and baseline[k] is not None]  # fmt: skip
    if shared:
        found = bootstrap_mean(
            [float(config[k]) - float(baseline[k]) for k in shared],  # type: ignore[arg-type]
            resamples=resamples, level=level, seed=seed,
        )  # fmt: skip
        return found
    a, b = _clean(list(config.values())), _clean(list(baseline.values()))
    if a.size == 0 or b.size == 0:
        return None
    mean = float(a.mean() - b.mean())
    if a.size < 2 or b.size < 2:
        return Interval(mean, None, None, min(a.size, b.size), paired=False)
    rng = np.random.default_rng(seed)
    da = a[rng.integers(0, a.size, size=(resamples, a.size))].mean(axis=1)
    db = b[rng.integers(0, b.size, size=(resamples, b.size))].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(da - db, [tail, 1 - tail])
    return Interval(mean, float(low), float(high), min(a.size, b.size), paired=False)
