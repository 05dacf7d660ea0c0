"""Solution units that create files (an edit whose `old` is empty): applying, re-applying,
refusing, independence, and how the sim harness sees them on main."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from swarm.errors import InvalidInput
from swarm.harness.sim import applied_on, is_applied
from swarm.sandbox import BoxSpec, UnconfinedBox
from swarm.tasks.units import (
    Edit,
    Unit,
    UnitAlreadyApplied,
    UnitDoesNotApply,
    apply_unit,
    check_independent,
    dump_units,
    parse_units,
)


def creating(unit_id: str, path: str, text: str) -> Unit:
    return Unit(unit_id, unit_id, (path,), (Edit(path, "", text),))


def test_a_unit_creates_its_file_once(tmp_path: Path) -> None:
    unit = creating("lib", "pkg/sub/lib.py", "X = 1\n")
    assert apply_unit(unit, tmp_path) == ["pkg/sub/lib.py"]
    assert (tmp_path / "pkg" / "sub" / "lib.py").read_text() == "X = 1\n"
    with pytest.raises(UnitAlreadyApplied):
        apply_unit(unit, tmp_path)
    (tmp_path / "pkg" / "sub" / "lib.py").write_text("something else\n")
    with pytest.raises(UnitDoesNotApply, match="should be a new file, but it exists"):
        apply_unit(unit, tmp_path)


def test_nothing_is_written_unless_every_edit_applies(tmp_path: Path) -> None:
    (tmp_path / "main.py").write_text("print('a')\n")
    unit = Unit(
        "both", "both", ("new.py", "main.py"),
        (Edit("new.py", "", "NEW = 1\n"), Edit("main.py", "not there", "x")),
    )  # fmt: skip
    with pytest.raises(UnitDoesNotApply):
        apply_unit(unit, tmp_path)
    assert not (tmp_path / "new.py").exists()


def test_created_files_round_trip_and_stay_independent(tmp_path: Path) -> None:
    units = [creating("a", "a.py", "A = 1\n"), creating("b", "b.py", "B = 2\n")]
    assert parse_units(dump_units(units)) == units
    check_independent(units, tmp_path)
    with pytest.raises(InvalidInput, match=r"it creates a\.py, which the start or another unit"):
        check_independent([*units, creating("c", "a.py", "C\n")], tmp_path)
    (tmp_path / "b.py").write_text("already\n")
    with pytest.raises(InvalidInput, match=r"it creates b\.py"):
        check_independent(units, tmp_path)


def test_the_sim_sees_a_created_file_on_main(tmp_path: Path) -> None:
    unit, other = creating("a", "pkg/a.py", "A = 1\n"), creating("b", "pkg/b.py", "B = 2\n")
    assert not is_applied(unit, tmp_path)
    apply_unit(unit, tmp_path)
    assert is_applied(unit, tmp_path) and not is_applied(other, tmp_path)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "a"], cwd=tmp_path, check=True)
    box = UnconfinedBox(BoxSpec(name="w1", checkout=tmp_path, env={"PATH": "/usr/bin:/bin"}))
    assert applied_on([unit, other], box, "HEAD") == {"a"}
