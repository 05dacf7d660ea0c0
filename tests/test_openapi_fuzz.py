"""schemathesis against a live hub (uvicorn on loopback), with a worker's token and with the
operator's: no server errors, no undocumented statuses, no response that breaks its schema
(issue "The hub's trust rules"). Fixed seed, bounded budget."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swarm.hub.server import BackgroundHub
from swarm.tools.client import HubClient

ST = Path(sys.executable).with_name("st")
CHECKS = "not_a_server_error,status_code_conformance,response_schema_conformance"
# GET /v1/task answers 503 on purpose until a run's set-up writes the task (docs/deployment.md).
EXCLUDED = "^/v1/task$"


@pytest.mark.slow
@pytest.mark.parametrize("who", ["worker", "operator"])
def test_the_openapi_tells_the_truth(hub: BackgroundHub, who: str, tmp_path: Path) -> None:
    st = str(ST) if ST.exists() else shutil.which("st")
    if st is None:
        pytest.fail("schemathesis is not installed: pip install -e '.[dev]'")
    token = hub.runtime.operator_token
    if who == "worker":
        with HubClient(hub.url, token) as operator:
            token = operator.register()["token"]
    done = subprocess.run(
        [
            st, "run", f"{hub.url}/openapi.json",
            "--header", f"Authorization: Bearer {token}",
            "--checks", CHECKS,
            "--phases", "examples,coverage,fuzzing",
            "--max-examples", "10",
            "--seed", "1",
            "--exclude-path-regex", EXCLUDED,
            "--no-color",
        ],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
