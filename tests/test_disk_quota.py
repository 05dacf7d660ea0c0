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


def test_a_box_past_its_quota_is_told_with_the_bytes_it_uses(tmp_path: Path) -> None:
    box = tmp_path / "box"
    box.mkdir()
    quota, over = watcher(box, 8)
    quota.look()  # the first look scans
    assert over == []
    write(box / "big", 12)
    quota.look()
    assert len(over) == 1 and over[0] >= 12 * MB


def test_space_freed_elsewhere_does_not_hide_a_boxs_writing(tmp_path: Path) -> None:
    """The fall in free space is counted poll by poll: a program that frees as much as the box
    writes, between two polls, leaves the box's writes counted."""
    box, elsewhere = tmp_path / "box", tmp_path / "elsewhere"
    box.mkdir()
    write(elsewhere, 24)
    quota, over = watcher(box, 32)  # a step of 16 MB: half the room left
    quota.look()
    write(box / "one", 12)
    quota.look()  # 12 MB fell: under the step, no scan
    assert over == []
    elsewhere.unlink()
    quota.look()  # 24 MB freed: the fall so far stays 12 MB
    write(box / "two", 24)
    quota.look()  # 36 MB fell in all: a scan, 36 MB of 32
    assert len(over) == 1 and over[0] >= 36 * MB


def test_a_box_close_to_its_quota_is_scanned_after_a_smaller_fall(tmp_path: Path) -> None:
    box = tmp_path / "box"
    box.mkdir()
    write(box / "start", 26)
    quota, over = watcher(box, 32)
    quota.look()  # 26 MB of 32: 6 MB of room, so a step of the 4 MB minimum
    assert over == []
    write(box / "more", 8)
    quota.look()
    assert len(over) == 1 and over[0] >= 34 * MB


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
