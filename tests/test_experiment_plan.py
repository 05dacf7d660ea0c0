"""An experiment's plan: the grid it describes, and a clear refusal of each mistake (through the
real command too: one line, nothing created)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from swarm.errors import InvalidInput, NotFound
from swarm.experiment.plan import Config, load_plan
from swarm.experiment.runner import _set_option, run_command, seeded_task
from tests.test_hazard import EXAMPLE

SWARM = str(Path(sys.executable).parent / "swarm")
ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(f'task = "{EXAMPLE}"\n' + text)
    return path


def test_the_plan_is_a_grid_of_configurations_times_seeds(tmp_path: Path) -> None:
    plan = load_plan(write(tmp_path, 'workers = [1, 4]\nwithout = ["", "claims", "dms,context"]'
                           "\nrepeats = 2\n[run]\nthink = 0.5\n"))  # fmt: skip
    assert plan.name == "plan"
    assert plan.seeds == [1, 2]
    assert plan.without == [(), ("claims",), ("context", "dms")]
    assert len(plan.configs) == 6 and len(plan.runs()) == 12
    assert [r.seed for r in plan.runs()[:6]] == [1] * 6  # a whole repeat before the next
    assert len({r.id for r in plan.runs()}) == 12
    assert plan.baseline_without == () and plan.baseline_setup == "sim"
    config = Config("hazard", "sim", 4, ("claims",))
    assert plan.baseline_of(config) == Config("hazard", "sim", 4, ())
    assert plan.varied == {"workers", "without", "seed"}
    assert plan.run["think"] == 0.5 and plan.run["budget"] == "10m"  # defaults filled in


def test_the_committed_plan_is_valid() -> None:
    plan = load_plan(ROOT / "examples" / "experiments" / "hazard-ablations.toml")
    assert plan.workers == [1, 4, 16] and len(plan.runs()) == 36


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("workers = [1]\nrepeat = 3\n", "unknown key repeat; known: name, task"),
        ("workers = []\n", "'workers' is empty; give at least one value"),
        ("workers = [1]\nwithout = []\n", "'without' is empty"),
        ("workers = [1]\nseeds = []\n", "'seeds' is empty"),
        ('workers = [1]\nwithout = ["", "claim"]\n', "unknown mechanism claim in --without"),
        ("workers = [0, 2]\n", "'workers' holds 0; give whole numbers of at least 1"),
        ("workers = [2, 2]\n", "'workers' repeats a value"),
        ("without = ['']\n", "'workers' is missing"),
        ("workers = [1]\nrepeats = 2\nseeds = [1]\n", "either seeds or repeats"),
        ('workers = [1]\nharness = "gpt"\n', "unknown harness 'gpt'"),
        ('workers = [1]\nharness = "mini"\n', "harness mini needs a model"),
        ('workers = [1]\nbaseline = "claims"\n', "which 'without' does not list"),
        ('workers = [1]\n[run]\nbudget = "soon"\n', "[run] budget: budget 'soon' is not a"),
        ("workers = [1]\n[run]\nthinking = 1\n", "unknown key thinking in [run]"),
        ("workers = [1]\n[prepare_options]\nseed = 4\n", "is set per run from seeds/repeats"),
        ('workers = [1]\n[[setups]]\nmodel = "x"\n[[setups]]\nmodel = "x"\n', "repeat a name"),
    ],
)
def test_a_mistake_in_the_plan_is_refused_saying_what_to_fix(
    tmp_path: Path, text: str, said: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        load_plan(write(tmp_path, text))
    assert said in caught.value.message
    assert str(tmp_path / "plan.toml") in caught.value.message


def test_a_missing_plan_or_task_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="no plan at"):
        load_plan(tmp_path / "nope.toml")
    (tmp_path / "plan.toml").write_text('task = "no-such-task"\nworkers = [1]\n')
    with pytest.raises(NotFound, match=r"no task\.toml in"):
        load_plan(tmp_path / "plan.toml")


def test_the_command_refuses_a_bad_plan_in_one_line_and_creates_nothing(tmp_path: Path) -> None:
    plan = write(tmp_path, 'workers = [1]\nwithout = ["chat"]\n')
    done = subprocess.run([SWARM, "experiment", str(plan), "--dir", str(tmp_path / "exp")],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode != 0
    assert done.stderr.strip().startswith("swarm: error: ")
    assert "unknown mechanism chat" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "exp").exists()


def test_a_seeded_task_is_prepared_once_per_seed_with_the_plans_options(tmp_path: Path) -> None:
    plan = load_plan(write(tmp_path, "workers = [2]\nseeds = [7]\n[prepare_options]\nunits = 3\n"))
    task = seeded_task(plan, "hazard", 7, tmp_path / "tasks")
    options = tomllib.loads((task / "task.toml").read_text())["prepare_options"]
    assert options["seed"] == 7 and options["units"] == 3
    assert options["hotspots"] == 3  # the rest as the task says
    units = json.loads((task / "solution" / "units.json").read_text())
    assert [u["id"] for u in units] == ["h01", "h02", "h03"]
    stamp = (task / "task.toml").stat().st_mtime_ns
    assert seeded_task(plan, "hazard", 7, tmp_path / "tasks") == task  # prepared: kept
    assert (task / "task.toml").stat().st_mtime_ns == stamp
    spec = plan.runs()[0]
    args = run_command(plan, spec, task, tmp_path / "run")
    assert args[1:4] == ["-m", "swarm", "run"] and "--without" in args  # `swarm run` itself
    assert args[args.index("--workers") + 1] == "2"


def test_setting_an_option_keeps_the_rest_of_the_task_file() -> None:
    toml = 'name = "x"\n\n[prepare_options]\nseed = 1\nunits = 48\n\n[environment]\npython = "3"\n'
    out = _set_option(_set_option(toml, "seed", 9), "failure_rate", 0.5)
    data = tomllib.loads(out)
    assert data["prepare_options"] == {"seed": 9, "units": 48, "failure_rate": 0.5}
    assert data["environment"] == {"python": "3"} and data["name"] == "x"
    assert tomllib.loads(_set_option('name = "x"\n', "units", 4))["prepare_options"] == {"units": 4}


def test_the_report_warns_where_compared_runs_differ_in_what_the_plan_did_not_vary(
    tmp_path: Path,
) -> None:
    from swarm.experiment.report import RunRow, reproducibility

    plan = load_plan(write(tmp_path, 'workers = [1, 4]\nwithout = ["", "claims"]\nrepeats = 2\n'))
    same = {"swarm_version": "0.1.0", "python": "3.11.7", "platform": "Linux", "cpu_count": 2,
            "prompt_sha256": "ab", "harness_version": "swarm 0.1.0",
            "models_reported": []}  # fmt: skip
    rows = [RunRow(s.id, s.config, s.seed, 1.0, {}, {**same, "task_sha256": f"task{s.seed}"})
            for s in plan.runs()]  # fmt: skip
    # The task differs by seed, the workers and switches by configuration: all planned.
    assert reproducibility(plan, rows) == []
    rows[0].provenance["cpu_count"] = 64
    rows[1].provenance["task_sha256"] = "edited"  # the same seed's task, changed in between
    rows[2].provenance["harness_version"] = "swarm 0.2.0"
    del rows[3].provenance["prompt_sha256"]  # not recorded: not a difference
    rows[4].provenance = {}
    warnings = reproducibility(plan, rows)
    assert len(warnings) == 4, warnings
    assert warnings[0].startswith("1 run(s) record no provenance")
    assert "runs differ in cpu_count, which the plan did not vary: 2 (6 runs); 64 (1 runs)" in (
        warnings[1])  # fmt: skip
    assert warnings[2].startswith("runs of task hazard seed 1 differ in task_sha256")
    assert warnings[3].startswith("runs of setup sim differ in harness_version")


def test_a_run_records_its_provenance_in_run_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from swarm.provenance import provenance, read_provenance, reported_models
    from swarm.tasks.model import load_task
    from swarm.worker.run import RunPlan, read_run_file, write_run_file

    monkeypatch.delenv("SWARM_SEED", raising=False)
    plan = load_plan(write(tmp_path, "workers = [1]\nseeds = [3]\n"))
    task = load_task(seeded_task(plan, "hazard", 3, tmp_path / "tasks"))
    found = provenance(task, "mini", None, "openai/a:0.25,anthropic/b:0.75")
    assert found["models"] == ["openai/a", "anthropic/b"]
    assert found["seed"] == "3"  # the task's (SWARM_SEED, when set, wins)
    assert found["harness_version"].startswith("mini-swe-agent ")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_run_file(RunPlan(task=task, run_dir=run_dir), provenance=found, started=1.0)
    assert read_provenance(run_dir) == found
    assert read_run_file(run_dir)["started"] == 1.0  # the run's own keys stay at the top
    assert reported_models(["done\nmodels reported by the provider: gpt-4.1-mini-2025-04-14",
                            "", "models reported by the provider: a, b"]) == [
        "a", "b", "gpt-4.1-mini-2025-04-14"]  # fmt: skip
