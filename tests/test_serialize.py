"""The append answer is put together from each entry's JSON, made once: it must say exactly what
encoding the whole answer at once says."""

from __future__ import annotations

import json

import pytest

from swarm.context import EntryType
from swarm.context.model import AppendResult, Claim, Entry, EntryDelivery
from swarm.hub import serialize
from swarm.messages.ports import Message

ENTRIES = [
    Entry(i, 1_700_000_000.5 + i, f"w{i}", EntryType.FACT, f'fact {i}: "quoted" \\ é ✓', ("a.py",))
    for i in range(1, 12)
]
CLAIM = Claim(3, "w3", 3, ("src/**",), 1_700_000_000.0, 1_700_000_300.0, body="the parser")
DM = Message(7, 1_700_000_001.0, "hub", "your claim #3 overlaps", None, "w1")


@pytest.mark.parametrize(
    ("shown", "more", "dms", "overlaps", "ended"),
    [
        ((), 0, [], (), ()),
        (tuple(ENTRIES[:8]), 3, [DM], (CLAIM,), ()),
        (tuple(ENTRIES[2:5]), 0, [], (), (CLAIM,)),
    ],
)
def test_the_assembled_answer_equals_the_answer_encoded_whole(
    shown: tuple[Entry, ...],
    more: int,
    dms: list[Message],
    overlaps: tuple[Claim, ...],
    ended: tuple[Claim, ...],
) -> None:
    made = AppendResult(ENTRIES[-1], overlaps, ended)
    block = EntryDelivery(shown, more, 1, 20)
    now = 1_700_000_100.0
    whole = {
        "result": {
            "entry": serialize.entry(made.entry),
            "overlaps": [serialize.claim(c, now) for c in overlaps],
            "ended": [serialize.claim(c, now) for c in ended],
        },
        "delivery": serialize.delivery(block, dms),
    }
    encode = serialize.AnswerJSON()
    for _twice in range(2):  # made, then from what was made
        got = encode.answer(encode.appended(made, now), encode.delivery(block, dms))
        assert json.loads(got) == whole
    assert ("grep" in json.loads(got)["delivery"]) is (more > 0)


def test_it_keeps_only_the_newest_entries_it_made() -> None:
    encode = serialize.AnswerJSON(size=4)
    for e in ENTRIES:
        encode.entry(e)
    assert list(encode._made) == [e.id for e in ENTRIES[-4:]]
    assert json.loads(encode.entry(ENTRIES[0])) == serialize.entry(ENTRIES[0])
