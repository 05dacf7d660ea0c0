"""The disk-quota watcher: when it scans a box's checkout, and what it does past the quota."""

from __future__ import annotations

import os
from pathlib import Path

from swarm.sandbox.disk import DiskQuota, usage

MB = 1024 * 1024


def write(path: Path, mb: int) -> None:
    with path.open("wb") as f:
        f.write(os.urandom(mb * MB))
        f.flush()
        os.fsync(f.fileno())


def watcher(box: Path, limit_mb: int) -> tuple[DiskQuota, list[int]]:
    quota, over = DiskQuota(poll=False), []
    quota.watch(box, box, limit_mb, over.append)
    return quota, over


def test_usage_counts_each_file_once_and_follows_no_links(tmp_path: Path) -> None:
    write(tmp_path / "a", 2)
    (tmp_path / "sub").mkdir()
    os.link(tmp_path / "a", tmp_path / "sub" / "same-a")
    (tmp_path / "link").symlink_to("/usr")
    assert 2 * MB <= usage(tmp_path) < 3 * MB


def fill(quota: DiskQuota, over: list[int], box: Path, chunk_mb: int, most_mb: int) -> int:
    """Write `chunk_mb` files into `box`, one look after each, until the watcher says the box
    is over its quota: the MB written by then (`most_mb` + 1 if it never did). Other programs on
    the machine write and free space on the same file system meanwhile; within one poll that can
    hide some of the box's writing, never all of it for long, so each test bounds how far the box
    gets rather than the poll it is stopped at."""
    written = 0
    while written <= most_mb and not over:
        write(box / f"chunk{written}", chunk_mb)
        written += chunk_mb
        quota.look()
    return written if over else most_mb + 1


def test_a_box_past_its_quota_is_told_with_the_bytes_it_uses(tmp_path: Path) -> None:
    box = tmp_path / "box"
    box.mkdir()
    quota, over = watcher(box, 8)
    quota.look()  # the first look scans
    assert over == []
    written = fill(quota, over, box, 4, 24)
    assert written <= 24 and over[0] >= written * MB


def test_space_freed_elsewhere_does_not_hide_a_boxs_writing(tmp_path: Path) -> None:
    """The fall in free space is counted poll by poll: a program that frees as much as the box
    writes, between two polls, leaves the box's writes counted. Measured against the free space
    at the last scan (the watcher before), the box below got to 88 MB of its 32."""
    box, elsewhere = tmp_path / "box", tmp_path / "elsewhere"
    box.mkdir()
    write(elsewhere, 24)
    quota, over = watcher(box, 32)  # a step of 16 MB: half the room left
    quota.look()
    write(box / "one", 12)
    quota.look()  # 12 MB fell: under the step, and 12 MB is under the quota anyway
    assert over == []
    elsewhere.unlink()
    quota.look()  # 24 MB freed: the fall so far stays 12 MB
    written = fill(quota, over, box, 4, 40)
    assert 12 + written <= 52, f"stopped at {12 + written} MB"
    assert over[0] > 32 * MB


def test_a_box_close_to_its_quota_is_scanned_after_a_smaller_fall(tmp_path: Path) -> None:
    """26 MB of 32: half the room is 3 MB, so the step is its 4 MB minimum, not 64 MB (where the
    box would have got to 90 MB)."""
    box = tmp_path / "box"
    box.mkdir()
    write(box / "start", 26)
    quota, over = watcher(box, 32)
    quota.look()
    assert over == []
    written = fill(quota, over, box, 2, 20)
    assert 26 + written <= 42, f"stopped at {26 + written} MB"
    assert over[0] > 32 * MB


def test_a_box_watched_later_on_a_known_file_system_is_scanned_at_once(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    quota, over = watcher(first, 32)
    quota.look()
    write(second / "already", 12)
    quota.watch(second, second, 8, over.append)
    quota.look()
    assert len(over) == 1 and over[0] >= 12 * MB
