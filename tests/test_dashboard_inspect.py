"""What a person can see of a real run in the dashboard: each session's transcript, main's files
and diff against the start, and each PR's size (a `swarm run` with simulated workers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from swarm.bootstrap import build_runtime
from swarm.config import Settings
from swarm.dashboard.transcripts import transcript
from swarm.errors import InvalidInput
from swarm.hub.server import BackgroundHub
from swarm.tasks.demo import make_scale_task


def test_a_runs_transcripts_code_and_pr_sizes_in_the_dashboard(tmp_path: Path) -> None:
    task = make_scale_task(tmp_path / "task", units=6)
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "swarm", "run", str(task.root), "--workers", "2", "--think",
         "0.2", "--run-dir", str(run_dir), "--quiet"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in (run_dir / "workers" / "sessions").iterdir())[0] == (
        "w1-session1.sim.json"
    )
    runtime = build_runtime(Settings(run_dir=run_dir))
    try:
        with BackgroundHub(runtime) as hub:
            api = f"{hub.url}/dashboard/api"
            session = httpx.get(f"{api}/workers/w1/sessions/1").json()
            commands = [s["text"] for s in session["steps"] if s["role"] == "command"]
            assert any(c.startswith("POST /v1/entries") and '"CLAIM"' in c for c in commands)
            assert any(c.startswith("git push") for c in commands)
            outputs = [s["text"] for s in session["steps"] if s["role"] == "output"]
            assert len(outputs) == len(commands) and any('"pr"' in o for o in outputs)
            assert httpx.get(f"{api}/workers/w1/sessions/999").json()["steps"] == []
            bad = httpx.get(f"{api}/workers/..%2F..%2Fx/sessions/1")
            assert bad.status_code in (404, 422)

            code = httpx.get(f"{api}/code").json()
            changed = {f["path"]: f for f in code["files"] if f["status"]}
            assert sorted(changed) == [f"units/u000{n}.py" for n in range(1, 7)]
            assert all(f["status"] == "modified" and f["added"] >= 1 for f in changed.values())
            assert code["stats"]["files"] == 6 and "+++ b/units/u0001.py" in code["diff"]
            assert {f["path"] for f in code["files"]} >= {"README.md", "units/__init__.py"}

            prs = httpx.get(f"{api}/prs").json()["prs"]
            assert prs and all(p["size"]["files"] == 1 and p["size"]["added"] >= 1 for p in prs
                               if p["state"] == "merged")  # fmt: skip
    finally:
        runtime.close()


def test_transcripts_read_cli_agent_logs_and_refuse_odd_names(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / "w2-session3.claude-code.stdout.log").write_text('{"type": "result"}\n')
    (sessions / "w2-session3.claude-code.stderr.log").write_text("")
    (sessions / "w2-session30.codex.stdout.log").write_text("another session\n")
    found = transcript(sessions, "w2", 3)
    assert found["steps"] == [{"role": "output", "text": '{"type": "result"}\n'}]
    assert found["files"] == ["w2-session3.claude-code.stderr.log",
                              "w2-session3.claude-code.stdout.log"]  # fmt: skip
    assert transcript(tmp_path / "none", "w2", 3)["steps"] == []
    with pytest.raises(InvalidInput, match="is not a worker name"):
        transcript(sessions, "../w2", 3)
