"""examples/tasks/jq end to end, from Debian's real packages (slow: downloads once a session):
its check (start 0, reference every pinned test), a 4-worker sim run reaching the reference
score, and a mini run against the scripted model whose agent calls `sw oracle` from inside
its bubblewrap sandbox."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import tomllib
from pathlib import Path
from typing import Any

import pytest

from swarm.evaluation import evaluate
from swarm.harness.scripted_server import ScriptedModelServer
from swarm.tasks import Task, apply_unit, load_units, prepare_task
from swarm.tasks.rebuild.oracle import published_oracle
from swarm.tools.client import HubClient
from swarm.worker.run import RunPlan, read_run_file
from swarm.worker.run_cli import execute

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tasks" / "jq"
CHECK = tomllib.loads((EXAMPLE / "task.toml").read_text())["check"]
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
GIT += ["-c", "init.defaultBranch=main"]

# Preparing and scoring 365 command lines twice take minutes on a busy 2-core machine.
# With test_rebuild_debian.py in one xdist process: both fetch Debian's source packages
# through the session's one private apt state, whose lock admits one apt-get at a time.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800), pytest.mark.xdist_group("debian")]


@pytest.fixture(scope="module")
def jq_task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    """A prepared copy: preparing never writes into the repository's examples/."""
    root = tmp_path_factory.mktemp("tasks") / "jq"
    root.mkdir()
    shutil.copy(EXAMPLE / "task.toml", root)
    shutil.copytree(EXAMPLE / "check", root / "check")
    return prepare_task(root)


def commit(repo: Path, message: str) -> None:
    subprocess.run([*GIT, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-qm", message], cwd=repo, check=True)


def test_the_check_start_scores_0_and_the_reference_every_pinned_test(
    jq_task: Task, tmp_path: Path
) -> None:
    start = tmp_path / "start"
    shutil.copytree(jq_task.start_dir, start)
    commit(start, "the start")
    empty = evaluate(jq_task, start, "main", tmp_path / "eval-start")
    assert empty.reason is None and (empty.passed, empty.total) == (CHECK["start_passed"], 365)
    reference = tmp_path / "reference"
    shutil.copytree(jq_task.start_dir, reference)
    for unit in load_units(jq_task):
        apply_unit(unit, reference)
    commit(reference, "every unit")
    full = evaluate(jq_task, reference, "main", tmp_path / "eval-reference")
    assert full.reason is None, full.output_tail
    assert (full.passed, full.total) == (CHECK["reference_passed"], CHECK["tests"])
    assert jq_task.check is not None and len(jq_task.check.pinned_ids()) == 365
    assert sorted(full.tests) == sorted(jq_task.check.pinned_ids())
    assert set(full.tests.values()) == {"passed"}
    # The libraries the reference drives are in the solution only, never in the start.
    assert not list(jq_task.start_dir.rglob("*.b64")) and not list(jq_task.start_dir.rglob("*.so*"))


def test_four_sim_workers_reach_the_reference_score(jq_task: Task, tmp_path: Path) -> None:
    plan = RunPlan(
        task=jq_task, run_dir=tmp_path / "run", workers=4, harness="sim", think=0.2,
        budget_seconds=600, eval_every=600,
    )  # fmt: skip
    outcome = execute(plan, quiet=True)
    assert outcome.stopped_because == "every worker finished"
    assert outcome.final is not None and outcome.final.reason is None, outcome.final
    assert (outcome.final.passed, outcome.final.total) == (CHECK["reference_passed"], 365)
    git_log = ["git", "-C", str(outcome.run_dir / "workspace.git"), "log", "--no-merges"]
    subjects = subprocess.run(
        [*git_log, "--format=%s", "main"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    # Each unit landed once (the sim commits `unit <id>: <title>`).
    landed = sorted(
        s.split(":")[0].removeprefix("unit ") for s in subjects if s.startswith("unit ")
    )
    assert landed == sorted(u.id for u in load_units(jq_task)), subjects
    program = published_oracle(outcome.run_dir)
    assert program is not None and program.program == "jq"


def test_a_mini_agent_calls_sw_oracle_from_inside_its_sandbox(
    jq_task: Task, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm stays off the network
    run_dir = tmp_path / "run"
    script = [
        "true",  # answered to the preflight's one call
        "sw oracle -c '.a + 1' <<< '{\"a\": 41}'",
        'sw oracle -n \'error("boom")\'; echo "status $?"',
        f'cat {jq_task.root}/oracle/jq; ls {run_dir}; cat {run_dir}/oracle/jq; echo "status $?"',
        'python -m jqpy -n 1; echo "status $?"',
        # A copy of jq installed on this machine is masked in the sandbox (where there is one).
        'for f in /usr/bin/jq /usr/lib/*/libjq.so.1; do [ -e "$f" ] && wc -c < "$f"; done; echo .',
    ]
    stopped = threading.Event()

    def stop_after_script(number: int, _body: dict[str, Any]) -> None:
        if number == len(script) + 1 and not stopped.is_set():
            stopped.set()
            info = read_run_file(run_dir)
            token = (run_dir / "operator.token").read_text().strip()
            with HubClient(str(info["hub_url"]), token, retry_for=5) as operator:
                operator.call("POST", "/v1/operator/stop")

    with ScriptedModelServer(script, on_request=stop_after_script) as model:
        plan = RunPlan(
            task=jq_task, run_dir=run_dir, workers=1, harness="mini", model="openai/scripted",
            api_base=model.url, budget_seconds=300, sandbox="bwrap",
        )  # fmt: skip
        outcome = execute(plan, quiet=True)
    assert stopped.is_set(), "the agent never got through its script"
    assert outcome.sandbox == "bwrap"
    # Request 1 was the preflight's; the session's requests follow, the one after the script
    # carrying the output of each command.
    after = model.requests[len(script)]["messages"]
    # mini-swe-agent shows each command's output as JSON (returncode, output).
    outputs = [json.loads(m["content"])["output"] for m in after if m["role"] == "tool"]
    first = model.requests[1]["messages"][1]["content"]
    assert "sw oracle ARGS... < input" in first and "`jq`" in first  # the prompt says how
    assert "42" in outputs[0], outputs[0]
    assert "jq: error (at <unknown>): boom" in outputs[1] and "status 5" in outputs[1]
    # The oracle (the task's and the run's copy) and the run directory are on this machine,
    # not in the agent's sandbox: of the run directory it sees only the folder of checkouts.
    assert outputs[2].count("No such file or directory") == 2, outputs[2]
    assert outputs[2].split("\n")[1] == "workers" and "status 1" in outputs[2]
    assert "No module named jqpy" in outputs[3] and "status 1" in outputs[3]  # the empty start
    installed = [
        p for p in ("/usr/bin/jq", *Path("/usr/lib").glob("*/libjq.so.1")) if Path(p).exists()
    ]
    assert outputs[4].count("Permission denied") == len(installed), outputs[4]
