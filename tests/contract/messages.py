"""The messages contract: checks every adapter of `swarm.messages.ports.Messages` must pass."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from swarm.errors import InvalidInput
from swarm.messages.ports import Messages
from swarm.registry import Worker


@dataclass
class MessagesHarness:
    """An adapter under test, a way to make workers, and (where a UI exists) a person's post."""

    messages: Messages
    new_worker: Callable[[], Worker]
    person_posts: Callable[[str], None] | None = None
    cleanup: list[Callable[[], None]] = field(default_factory=list)


def channel_post_reaches_every_other_worker_once(h: MessagesHarness) -> None:
    a, b, c = h.new_worker(), h.new_worker(), h.new_worker()
    sent = h.messages.post(a, "I take the parser")
    assert sent.author == a.name and sent.channel == "tasks"
    for peer in (b, c):
        digest = h.messages.take_channel(peer)
        assert [m.body for m in digest.messages] == ["I take the parser"]
        assert digest.messages[0].author == a.name and digest.more == 0
        assert h.messages.take_channel(peer).messages == ()
    assert h.messages.take_channel(a).messages == ()  # one's own posts are not handed back


def direct_message_is_handed_out_exactly_once(h: MessagesHarness) -> None:
    a, b, c = h.new_worker(), h.new_worker(), h.new_worker()
    sent = h.messages.direct(a, b, "your claim overlaps mine")
    assert sent.recipient == b.name and sent.author == a.name
    got = h.messages.take_direct(b)
    assert [(m.author, m.body, m.recipient) for m in got] == [
        (a.name, "your claim overlaps mine", b.name)
    ]
    assert h.messages.take_direct(b) == []
    assert h.messages.take_direct(a) == [] and h.messages.take_direct(c) == []


def directs_and_channel_are_separate_streams(h: MessagesHarness) -> None:
    a, b = h.new_worker(), h.new_worker()
    h.messages.post(a, "announcement")
    h.messages.direct(a, b, "urgent")
    assert [m.body for m in h.messages.take_direct(b)] == ["urgent"]
    assert [m.body for m in h.messages.take_channel(b).messages] == ["announcement"]


def directs_come_oldest_first(h: MessagesHarness) -> None:
    a, b, c = h.new_worker(), h.new_worker(), h.new_worker()
    h.messages.direct(a, c, "one")
    h.messages.direct(b, c, "two")
    h.messages.direct(a, c, "three")
    assert [m.body for m in h.messages.take_direct(c)] == ["one", "two", "three"]


def operator_and_hub_posts_reach_workers(h: MessagesHarness) -> None:
    a = h.new_worker()
    h.messages.post("operator", "focus on the failing tests")
    h.messages.direct("hub", a, "claim overlap with w0")
    digest = h.messages.take_channel(a)
    assert [(m.author, m.body) for m in digest.messages] == [
        ("operator", "focus on the failing tests")
    ]
    assert [(m.author, m.body) for m in h.messages.take_direct(a)] == [
        ("hub", "claim overlap with w0")
    ]


def digest_is_capped_and_counts_the_rest(h: MessagesHarness) -> None:
    a, b = h.new_worker(), h.new_worker()
    for i in range(5):
        h.messages.post(a, f"post {i}")
    first = h.messages.take_channel(b, limit=2)
    assert [m.body for m in first.messages] == ["post 0", "post 1"] and first.more == 3
    second = h.messages.take_channel(b, limit=2)
    assert [m.body for m in second.messages] == ["post 2", "post 3"] and second.more == 1
    third = h.messages.take_channel(b, limit=2)
    assert [m.body for m in third.messages] == ["post 4"] and third.more == 0


def bad_input_is_refused(h: MessagesHarness) -> None:
    a, b = h.new_worker(), h.new_worker()
    with pytest.raises(InvalidInput):
        h.messages.post(a, "   ")
    with pytest.raises(InvalidInput):
        h.messages.post(a, "x", channel="Not A Channel!")
    with pytest.raises(InvalidInput):
        h.messages.direct(a, a, "talking to myself")
    with pytest.raises(InvalidInput):
        h.messages.direct(a, b, "x" * 100_000)
    assert h.messages.take_direct(b) == [] and h.messages.take_channel(b).messages == ()


def history_lists_channel_and_directs(h: MessagesHarness) -> None:
    a, b = h.new_worker(), h.new_worker()
    first = h.messages.post(a, "history one")
    h.messages.post(b, "history two")
    h.messages.direct(a, b, "private")
    bodies = [m.body for m in h.messages.history(channel="tasks")]
    assert bodies[-2:] == ["history one", "history two"]
    later = h.messages.history(channel="tasks", after_id=first.id)
    assert [m.body for m in later] == ["history two"]
    dms = h.messages.history(worker=a)
    assert [(m.body, m.recipient) for m in dms] == [("private", b.name)]


def concurrent_takes_never_duplicate(h: MessagesHarness) -> None:
    a, b = h.new_worker(), h.new_worker()
    for i in range(12):
        h.messages.direct(a, b, f"dm {i}")
    got: list[str] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(3):
            taken = h.messages.take_direct(b)
            with lock:
                got.extend(m.body for m in taken)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == sorted(f"dm {i}" for i in range(12))


def a_person_posting_in_the_ui_reaches_every_worker(h: MessagesHarness) -> None:
    if h.person_posts is None:
        pytest.skip("this adapter has no UI where a person posts")
    a, b = h.new_worker(), h.new_worker()
    h.person_posts("please look at issue 7")
    for w in (a, b):
        assert [m.body for m in h.messages.take_channel(w).messages] == ["please look at issue 7"]


MESSAGES_CONTRACT = [
    channel_post_reaches_every_other_worker_once,
    direct_message_is_handed_out_exactly_once,
    directs_and_channel_are_separate_streams,
    directs_come_oldest_first,
    operator_and_hub_posts_reach_workers,
    digest_is_capped_and_counts_the_rest,
    bad_input_is_refused,
    history_lists_channel_and_directs,
    concurrent_takes_never_duplicate,
    a_person_posting_in_the_ui_reaches_every_worker,
]
