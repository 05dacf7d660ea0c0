"""Real sandboxes for tests: bwrap, and docker on the machine's engine (started here when none
answers and this is root, as scripts/compose-check does; the image is built when missing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarm.sandbox import Sandbox, get_sandbox

ROOT = Path(__file__).resolve().parents[1]
# The docker backend's tests take a container per box (and the image once per machine): they
# run with the slow tests (CI runs those), bwrap's in every run.
BACKENDS = ["bwrap", pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.slow])]


def _engine_answers() -> bool:
    try:
        done = subprocess.run(["docker", "info"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[None]:
    """A Docker engine that answers; the test is skipped, saying why, where none can run."""
    if shutil.which("docker") is None:
        pytest.skip("no docker command on this machine (scripts/dev-setup installs docker.io)")
    started = None
    if not _engine_answers():
        dockerd = shutil.which("dockerd")
        if dockerd is None or os.geteuid() != 0:
            why = "no dockerd" if dockerd is None else "starting dockerd needs root"
            pytest.skip(f"no Docker engine answers and {why}")
        log = open(Path(tempfile.gettempdir()) / "swarm-tests-dockerd.log", "ab")  # noqa: SIM115
        started = subprocess.Popen([dockerd], stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 60
        while not _engine_answers():
            if started.poll() is not None or time.monotonic() > deadline:
                started.terminate()
                pytest.skip(f"dockerd could not start here (see {log.name})")
            time.sleep(1)
    try:
        have = subprocess.run(
            ["docker", "image", "inspect", os.environ.get("SWARM_DOCKER_IMAGE", "swarm:local")],
            capture_output=True,
        )
        if have.returncode != 0:  # once per machine: a few minutes
            built = subprocess.run(
                [sys.executable, str(ROOT / "scripts" / "build-sandbox-image")],
                capture_output=True,
                text=True,
                timeout=1800,
            )
            assert built.returncode == 0, built.stdout + built.stderr
        yield
    finally:
        if started is not None:
            started.terminate()
            started.wait(timeout=60)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_engine")
    return str(request.param)


@pytest.fixture
def sandbox(backend: str) -> Sandbox:
    return get_sandbox(backend)
