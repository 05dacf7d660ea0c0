"""The hazard workload: deterministic per seed, sound (the start scores 0, every unit applied
scores all), with each hazard really there; the sim's unit handling; the attempt measures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swarm.errors import InvalidInput
from swarm.harness.sim_units import apply, load_sim_units, on_main
from swarm.report.attempts import repeated_failures, thrown_away
from swarm.tasks.prepare import prepare_task
from swarm.tasks.units import apply_unit

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tasks" / "hazard"


def hazard_task(tmp_path: Path, name: str = "t", **options: object) -> Path:
    root = tmp_path / name
    shutil.copytree(EXAMPLE, root)
    toml = (root / "task.toml").read_text()
    for key, value in options.items():
        lines = [ln for ln in toml.splitlines() if not ln.startswith(f"{key} =")]
        toml = "\n".join(lines) + f"\n{key} = {value}\n"
    (root / "task.toml").write_text(toml)
    prepare_task(root)
    return root


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def score(task: Path, checkout: Path) -> tuple[int, int]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(task / "hidden")],
        cwd=checkout, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    last = done.stdout.strip().splitlines()[-1]
    passed = int(last.split(" passed")[0].split()[-1]) if " passed" in last else 0
    failed = int(last.split(" failed")[0].split()[-1]) if " failed" in last else 0
    return passed, passed + failed


def test_the_same_seed_makes_the_same_task_and_another_seed_another(tmp_path: Path) -> None:
    one, two = hazard_task(tmp_path, "a", seed=7), hazard_task(tmp_path, "b", seed=7)
    other = hazard_task(tmp_path, "c", seed=8)
    for part in ("start", "hidden", "solution"):
        assert tree(one / part) == tree(two / part)
    assert tree(one / "solution") != tree(other / "solution")


def test_the_start_scores_zero_and_every_unit_applied_scores_all(tmp_path: Path) -> None:
    task = hazard_task(tmp_path, units=24)
    checkout = tmp_path / "checkout"
    shutil.copytree(task / "start", checkout)
    assert score(task, checkout) == (0, 24)
    units = load_sim_units((task / "solution" / "units.json").read_text())
    for unit in units:
        apply_unit(unit.unit, checkout)
        done = subprocess.run([sys.executable, unit.hazards.check], cwd=checkout,
                              capture_output=True, text=True, check=False)  # fmt: skip
        # A unit's check passes once it and what it needs are in.
        assert done.returncode == 0, done.stdout
    assert score(task, checkout) == (24, 24)


def test_every_hazard_is_there_at_the_defaults(tmp_path: Path) -> None:
    task = hazard_task(tmp_path)
    units = load_sim_units((task / "solution" / "units.json").read_text())
    assert len(units) == 48
    hazards = [u.hazards for u in units]
    assert sum(bool(h.hotspots) for h in hazards) >= 10
    assert sum(bool(h.needs) for h in hazards) >= 5
    assert sum(bool(h.pitfall) for h in hazards) >= 5
    assert sum(u.hidden for u in units) >= 2
    start = task / "start"
    hidden = next(u for u in units if u.hidden)
    assert (
        hidden.hazards.function not in (start / hidden.hazards.file).read_text().split("import")[0]
    )  # the goal's file only re-exports it
    assert f"def {hidden.hazards.function}(" in (start / hidden.hazards.real_file).read_text()


def test_a_pitfall_fails_its_check_until_the_reason_is_known(tmp_path: Path) -> None:
    task = hazard_task(tmp_path)
    units = load_sim_units((task / "solution" / "units.json").read_text())
    unit = next(u for u in units if u.hazards.pitfall and not u.hazards.needs)
    checkout = tmp_path / "checkout"
    shutil.copytree(task / "start", checkout)
    apply(unit, checkout, naive=True)
    failed = subprocess.run([sys.executable, unit.hazards.check], cwd=checkout,
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert failed.returncode == 1 and failed.stdout.startswith(f"FAIL {unit.id}:")
    shutil.rmtree(checkout)
    shutil.copytree(task / "start", checkout)
    apply(unit, checkout)
    ok = subprocess.run([sys.executable, unit.hazards.check], cwd=checkout, check=False)
    assert ok.returncode == 0


def test_hotspot_lines_apply_and_count_wherever_peers_put_theirs(tmp_path: Path) -> None:
    task = hazard_task(tmp_path)
    units = load_sim_units((task / "solution" / "units.json").read_text())
    both = [u for u in units if "hz/registry.py" in u.hazards.hotspots][:2]
    checkout = tmp_path / "checkout"
    shutil.copytree(task / "start", checkout)
    apply(both[1], checkout)
    apply(both[0], checkout)  # its line goes above the marker, after the other's
    assert apply(both[0], checkout) == []  # nothing left: already applied
    paths = sorted({e.path for u in both for e in u.unit.edits})
    texts = {p: (checkout / p).read_text() for p in paths}
    assert on_main(both, texts) == {both[0].id, both[1].id}
    assert on_main(both, {p: (task / "start" / p).read_text() for p in paths}) == set()


def test_bad_options_are_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"prepare_options\.units must be 1 to 999"):
        hazard_task(tmp_path, "a", units=0)
    with pytest.raises(InvalidInput, match=r"prepare_options\.hotspot_rate must be a number"):
        hazard_task(tmp_path, "b", hotspot_rate=2)
    with pytest.raises(InvalidInput, match=r"prepare_options\.colour is not a hazard option"):
        hazard_task(tmp_path, "c", colour=1)


def attempt(worker: str, unit: str, began: float, ended: float, outcome: str,
            reason: str = "") -> dict[str, object]:  # fmt: skip
    return {"worker": worker, "unit": unit, "began": began, "ended": ended, "outcome": outcome,
            "reason": reason}  # fmt: skip


def test_repeated_failures_count_a_reason_met_before_the_attempt_began() -> None:
    rows = [
        attempt("w1", "h01", 0, 10, "failed", "pitfall: x"),
        attempt("w2", "h01", 5, 12, "failed", "pitfall: x"),  # began before w1's ended: new
        attempt("w3", "h01", 11, 14, "failed", "pitfall: x"),  # known: repeated
        attempt("w3", "h01", 15, 18, "failed", "needs unit h00 merged first"),  # another reason
        attempt("w4", "h02", 20, 22, "failed", "pitfall: x"),  # another unit
        attempt("w1", "h01", 30, 33, "merged"),
        attempt("w2", "h01", 31, 34, "duplicate"),
    ]
    assert repeated_failures(rows) == 1
    assert thrown_away(rows) == 1


def test_the_measures_read_a_run_s_attempts(tmp_path: Path) -> None:
    from swarm.report.attempts import read_attempts

    folder = tmp_path / "workers" / "attempts"
    folder.mkdir(parents=True)
    (folder / "w1.jsonl").write_text(
        json.dumps(attempt("w1", "h01", 0, 1, "failed", "r")) + "\n" + '{"cut short\n'
    )
    (folder / "w2.jsonl").write_text(json.dumps(attempt("w2", "h01", 2, 3, "failed", "r")) + "\n")
    rows = read_attempts(tmp_path)
    assert rows is not None and [r["worker"] for r in rows] == ["w1", "w2"]
    assert repeated_failures(rows) == 1
    assert read_attempts(tmp_path / "elsewhere") is None


def test_what_a_worker_learns_from_peers_entries() -> None:
    from swarm.harness.sim_units import Knowledge

    know = Knowledge()
    units = {"h01": None, "h02": None, "h03": None, "h04": None}
    know.learn(
        [
            {"type": "PATCH_SUMMARY", "body": "unit h01 (implement f01): merged PR #3"},
            {"type": "FAIL", "body": "unit h02: needs unit h01 merged first (check: ...)"},
            {"type": "FAIL", "body": "unit h03: pitfall: f03(-1) must raise ValueError"},
            {"type": "OBSERVED", "body": "unit h04: f04 is defined in hz/m09.py, not hz/m04.py"},
            {"type": "FACT", "body": "unit h99: not a unit of this task"},
        ],
        units,
    )
    assert know.done == {"h01"} and know.needs == {"h02": {"h01"}}
    assert know.reasons == {"h03": "f03(-1) must raise ValueError"}
    assert know.homes == {"h04": "hz/m09.py"}
