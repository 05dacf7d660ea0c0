"""Which claims overlap which, fast enough for a thousand workers' claims on every poll.

Two path items can only overlap when the literal part of one (its segments before the first
glob character) is a prefix of the other's, so each item is compared only with the items filed
under its own literal prefix or one of that prefix's ancestors; topics only meet equal topics."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from swarm.context import scope as scopes

Key = tuple[str, ...]


def literal_prefix(item: str) -> Key:
    """The item's segments before the first one with a glob character; a topic is its own key."""
    if item.startswith(scopes.TOPIC_PREFIX):
        return (item,)
    path, _symbol = scopes.split_symbol(item)  # a symbol is filed under its file
    out = []
    for segment in path.split("/"):
        if set(segment) & scopes.GLOB_CHARS:
            break
        out.append(segment)
    return ("/", *out)  # "/" keeps paths apart from topics


def overlap_pairs(claims: Sequence[tuple[int, str, Iterable[str]]]) -> set[tuple[int, int]]:
    """Pairs (lower id, higher id) of claims by different owners whose scopes overlap.

    `claims` holds (claim id, owner, scope items)."""
    filed: dict[Key, set[int]] = defaultdict(set)
    items: dict[int, tuple[str, ...]] = {}
    owner: dict[int, str] = {}
    for claim_id, who, scope in claims:
        items[claim_id] = tuple(scope)
        owner[claim_id] = who
        for item in items[claim_id]:
            filed[literal_prefix(item)].add(claim_id)
    candidates: set[tuple[int, int]] = set()
    for key, ids in filed.items():
        # Everything filed under this key or an ancestor of it (a topic has no ancestors).
        ancestors = [key[:n] for n in range(1, len(key))] if key[0] == "/" else []
        near = set(ids).union(*(filed.get(a, set()) for a in ancestors))
        for a in ids:
            candidates.update((min(a, b), max(a, b)) for b in near if b != a)
    return {
        (a, b)
        for a, b in candidates
        if owner[a] != owner[b] and scopes.overlaps(items[a], items[b])
    }


def overlapping_claims(
    claims: Sequence[tuple[int, str, Iterable[str]]], cap: int = 12
) -> dict[int, list[int]]:
    """For each claim that overlaps another owner's: up to `cap` of those claims, oldest first.

    Claims with the same scope are compared once, so many workers on few files stay cheap."""
    groups: dict[tuple[str, ...], list[tuple[int, str]]] = defaultdict(list)
    for claim_id, who, scope in claims:
        groups[tuple(scope)].append((claim_id, who))
    keys = list(groups)
    meeting = overlap_pairs([(n, str(n), key) for n, key in enumerate(keys)])
    near: dict[int, list[int]] = defaultdict(list)
    for a, b in meeting:
        near[a].append(b)
        near[b].append(a)
    out: dict[int, list[int]] = {}
    for n, key in enumerate(keys):
        others = sorted((cid, who) for g in (n, *near[n]) for cid, who in groups[keys[g]])
        for claim_id, who in groups[key]:
            partners = [cid for cid, w in others if w != who][:cap]
            if partners:
                out[claim_id] = partners
    return out
