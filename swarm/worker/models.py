"""Model mixes: a run may give a strong model to some workers and a cheaper one to the rest."""

from __future__ import annotations

from swarm.errors import InvalidInput

GOLDEN = 0.6180339887498949


def parse_mix(mix: str) -> list[tuple[str, float]]:
    """'a/model:0.25,b/model:0.75' → [(model, share), ...]; shares are normalized."""
    parts: list[tuple[str, float]] = []
    for item in mix.split(","):
        model, sep, share = item.strip().rpartition(":")
        try:
            value = float(share) if sep else -1.0
        except ValueError:
            value = -1.0
        if not model or value <= 0:
            raise InvalidInput(
                f"bad model mix item {item!r}: write MODEL:SHARE, e.g. openai/gpt-4.1:0.25"
            )
        parts.append((model, value))
    total = sum(share for _, share in parts)
    return [(model, share / total) for model, share in parts]


def pick_model(model: str | None, mix: str | None, worker_index: int) -> str | None:
    """The model for the worker with this index, deterministically; shares hold for any N."""
    if not mix:
        return model
    # Low-discrepancy sequence: the first N workers split by the shares as closely as possible.
    position = (worker_index * GOLDEN) % 1.0
    cumulative = 0.0
    for name, share in parse_mix(mix):
        cumulative += share
        if position < cumulative:
            return name
    return parse_mix(mix)[-1][0]
