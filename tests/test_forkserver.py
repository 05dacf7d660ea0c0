"""The fork server that starts a bwrap box's commands: each behaves as a `subprocess.Popen`
(pipes, exit status, signals, time limits, a missing program), takes its setup (cgroups,
rlimits, namespaces) from data, and ends with the process that started the server."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from swarm.sandbox import BoxSpec, Launch, SandboxLimits, get_sandbox, popen, run
from swarm.sandbox.env import base_env
from swarm.sandbox.forkserver import ChildSetup, ForkServer, ServedPopen
from swarm.sandbox.limits import CgroupSet

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


@pytest.fixture
def server() -> ForkServer:
    return ForkServer.shared()


def test_a_served_command_has_its_pipes_input_environment_and_exit_status(
    server: ForkServer, tmp_path: Path
) -> None:
    process = server.popen(
        ["sh", "-c", 'pwd; echo "$GREETING"; wc -c; echo oops >&2; exit 3'],
        ChildSetup(),
        cwd=str(tmp_path),
        env={**ENV, "GREETING": "hello"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert isinstance(process, ServedPopen)
    out, err = process.communicate("x" * 300_000)  # past a pipe's buffer both ways
    assert out.split() == [str(tmp_path), "hello", "300000"]
    assert err == "oops\n"
    assert process.returncode == 3


def test_a_served_command_takes_its_rlimits_and_cgroups(server: ForkServer) -> None:
    limit = 3 * 1024 * 1024
    cgroups = CgroupSet("forkserver-test", SandboxLimits(processes=64))
    try:
        setup = ChildSetup(
            cgroup_procs=tuple(str(path / "cgroup.procs") for path in cgroups.dirs),
            rlimits=((resource.RLIMIT_FSIZE, limit),),
        )
        done = server.popen(
            ["bash", "-c", "ulimit -f; cat /proc/self/cgroup"],
            setup,
            env=ENV,
            stdout=subprocess.PIPE,
            text=True,
        )
        out, _ = done.communicate()
        assert out.splitlines()[0] == str(limit // 1024)  # ulimit -f counts 1024-byte blocks
        assert cgroups.dirs or os.geteuid() != 0  # root may make them
        for path in cgroups.dirs:
            assert path.name in out
    finally:
        cgroups.close()


def test_a_served_command_joins_the_namespaces_it_is_given(server: ForkServer) -> None:
    sandbox = get_sandbox("bwrap")
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    env = {**base_env(), "SWARM_HUB_URL": "http://127.0.0.1:9"}  # a box with its own network
    box = sandbox.open(BoxSpec(name="fs-ns", checkout=folder, env=env))
    try:
        how = box.launch(["true"])
        assert how.setup is not None and len(how.setup.namespaces) == 2
        joined = server.popen(
            ["readlink", "/proc/self/ns/net"],
            ChildSetup(namespaces=how.setup.namespaces),
            env=ENV,
            stdout=subprocess.PIPE,
            text=True,
        )
        inside, _ = joined.communicate()
        assert inside.strip() != os.readlink("/proc/self/ns/net")
        assert joined.returncode == 0
    finally:
        box.close()


def test_time_limits_signals_and_a_missing_program(server: ForkServer) -> None:
    slow = server.popen(["sleep", "30"], ChildSetup(), env=ENV, start_new_session=True)
    with pytest.raises(subprocess.TimeoutExpired):
        slow.wait(0.2)
    assert slow.poll() is None
    os.killpg(slow.pid, signal.SIGKILL)  # its own session: the group reaches it
    assert slow.wait(10) == -signal.SIGKILL
    with pytest.raises(FileNotFoundError):
        server.popen(["/no/such/program"], ChildSetup(), env=ENV)
    with pytest.raises(ValueError, match="preexec_fn"):
        server.popen(["true"], ChildSetup(), preexec_fn=lambda: None)


def test_bwrap_commands_go_through_the_fork_server(tmp_path: Path) -> None:
    box = get_sandbox("bwrap").open(BoxSpec(name="fs-run", checkout=tmp_path, env=base_env()))
    try:
        process = popen(box, ["true"])
        assert isinstance(process, ServedPopen)
        process.wait(30)
        done = run(box, ["bash", "-c", "echo inside; ulimit -f"], timeout=30)
        assert done.returncode == 0
        size = SandboxLimits().file_size_mb * 1024
        assert done.stdout.split() == ["inside", str(size)]
    finally:
        box.close()


def test_where_the_fork_server_is_turned_off_commands_fork_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARM_SANDBOX_FORKSERVER", "0")
    box = get_sandbox("bwrap").open(BoxSpec(name="fs-off", checkout=tmp_path, env=base_env()))
    try:
        process = popen(box, ["bash", "-c", "ulimit -f"], stdout=subprocess.PIPE, text=True)
        assert not isinstance(process, ServedPopen)
        out, _ = process.communicate(timeout=30)
        assert out.strip() == str(SandboxLimits().file_size_mb * 1024)
    finally:
        box.close()


def test_the_server_and_its_commands_end_with_the_process_that_started_them(
    tmp_path: Path,
) -> None:
    script = textwrap.dedent(
        """
        import sys
        from swarm.sandbox.forkserver import ChildSetup, ForkServer
        server = ForkServer.shared()
        child = server.popen(["sleep", "300"], ChildSetup(), env={"PATH": "/usr/bin:/bin"},
                             start_new_session=True)
        print(server.process.pid, child.pid, flush=True)
        sys.stdin.read()
        """
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    server_pid, command_pid = (int(n) for n in owner.stdout.readline().split())
    assert psutil.pid_exists(server_pid) and psutil.pid_exists(command_pid)
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        alive = [
            pid
            for pid in (server_pid, command_pid)
            if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        ]
        if not alive:
            break
        time.sleep(0.1)
    assert not alive, f"still running after their owner was killed: {alive}"


def test_a_fresh_server_after_a_fork(server: ForkServer) -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child must not share its parent's server
        try:
            mine = ForkServer.shared()
            os.write(write, b"new" if mine is not server and mine.owner == os.getpid() else b"same")
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 16) == b"new"
    os.close(read)


def test_launch_carries_its_setup_for_the_fork_server(tmp_path: Path) -> None:
    box = get_sandbox("bwrap").open(BoxSpec(name="fs-launch", checkout=tmp_path, env=base_env()))
    try:
        how: Launch = box.launch(["true"])
        assert how.setup is not None
        fsize = dict(how.setup.rlimits)[resource.RLIMIT_FSIZE]
        assert fsize == SandboxLimits().file_size_mb * 1024 * 1024
        assert how.setup.namespaces == ()  # no network: bwrap unshares its own
    finally:
        box.close()
