"""The sandbox port on real backends (bwrap; docker on the machine's engine): what a command in a
box sees and may do, its limits, and the merge check that runs the PR's code in one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from swarm.bootstrap import build_runtime
from swarm.config import Settings
from swarm.errors import CheckFailed, InvalidInput
from swarm.hub.server import BackgroundHub
from swarm.sandbox import Box, BoxSpec, Sandbox, SandboxLimits, get_sandbox, popen, run
from swarm.sandbox.env import agent_env, base_env
from swarm.tools.client import HubClient
from swarm.workspace.merge import run_check

pytest_plugins = ["sandboxes"]  # the backend, sandbox and docker_engine fixtures
SECRET = "swo_operator-secret-that-must-never-leak"


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[BackgroundHub]:
    runtime = build_runtime(Settings(run_dir=tmp_path / "run"))
    with BackgroundHub(runtime) as server:
        yield server
    runtime.close()


def worker_env(hub: BackgroundHub) -> dict[str, str]:
    with HubClient(hub.url, hub.runtime.operator_token) as operator:
        token = operator.register()["token"]
    return agent_env(hub_url=hub.url, token=token, worker="w1")


def bash(box: Box, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run(box, ["bash", "-c", command], timeout=timeout, merge_stderr=True)


def test_a_command_sees_its_checkout_its_environment_and_the_hub_only(
    sandbox: Sandbox, hub: BackgroundHub, tmp_path: Path
) -> None:
    checkout = tmp_path / "w1"
    checkout.mkdir()
    (tmp_path / "next-door").mkdir()
    (tmp_path / "next-door" / "secret.txt").write_text(SECRET)
    env = worker_env(hub)
    box = sandbox.open(BoxSpec(name="w1", checkout=checkout, env=env))
    try:
        done = bash(box, "pwd; echo written > mine.txt; id -u; env; sw whoami")
        assert done.returncode == 0, done.stdout
        assert done.stdout.splitlines()[0] == str(checkout)
        assert (checkout / "mine.txt").read_text() == "written\n"  # the checkout is read-write
        assert int(done.stdout.splitlines()[1]) != 0  # never root
        assert "you are w1" in done.stdout
        shown = dict(line.split("=", 1) for line in done.stdout.splitlines()[2:] if "=" in line)
        assert shown["SWARM_TOKEN"] == env["SWARM_TOKEN"] and "SWARM_OPERATOR_TOKEN" not in shown
        outside = bash(box, f"cat {tmp_path}/next-door/secret.txt; ls /proc | grep -c '^[0-9]'")
        assert SECRET not in outside.stdout and "No such file" in outside.stdout
        assert int(outside.stdout.split()[-1]) < 10  # its own processes only
        root = bash(box, "touch /usr/x /etc/x 2>&1; echo tmp > /tmp/t && cat /tmp/t")
        assert root.stdout.count("Read-only file system") + root.stdout.count("denied") >= 2
        assert root.stdout.strip().endswith("tmp")
    finally:
        box.close()


def test_of_swarms_own_code_a_box_holds_only_what_sw_runs(
    sandbox: Sandbox, hub: BackgroundHub, tmp_path: Path
) -> None:
    # The rest of the package writes the demo's and the hazard workload's solutions and hidden
    # tests, and holds reference implementations: an agent reading it would know its score.
    import swarm

    box = sandbox.open(BoxSpec(name="w1", checkout=tmp_path, env=worker_env(hub)))
    try:
        done = bash(
            box,
            "python3 -c 'import swarm, os; d = os.path.dirname(swarm.__file__); "
            "print(sorted(os.listdir(d)))'; "
            f"ls {Path(swarm.__file__).parent}/tasks 2>&1; "
            "python3 -c 'import swarm.tasks.demo_textkit' 2>&1 | tail -1; sw whoami",
        )
    finally:
        box.close()
    assert "['__init__.py', 'tools']" in done.stdout, done.stdout
    assert "No module named 'swarm.tasks'" in done.stdout, done.stdout
    assert "No such file" in done.stdout and "you are w1" in done.stdout


def test_pipes_timeouts_and_background_processes(sandbox: Sandbox, tmp_path: Path) -> None:
    box = sandbox.open(BoxSpec(name="w1", checkout=tmp_path, env=base_env()))
    try:
        process = popen(
            box, ["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        out, err = process.communicate(b"through the box\n", timeout=60)
        assert (out, err, process.returncode) == (b"through the box\n", b"", 0)
        split = run(box, ["bash", "-c", "echo out; echo err >&2; exit 3"], timeout=60)
        assert (split.stdout, split.stderr, split.returncode) == ("out\n", "err\n", 3)
        started = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired) as expired:
            run(box, ["bash", "-c", "echo before; sleep 60"], timeout=3)
        assert "before" in str(expired.value.output) and time.monotonic() - started < 30
        # What a command leaves running in the background ends with it.
        left = bash(box, "sleep 300 >/dev/null 2>&1 & echo $!")
        assert left.returncode == 0
        after = bash(box, "ps -eo args 2>/dev/null | grep -c '^sleep 300' || true")
        assert after.stdout.strip() == "0", after.stdout
    finally:
        box.close()


def test_a_box_without_network_reaches_nothing(
    sandbox: Sandbox, hub: BackgroundHub, tmp_path: Path
) -> None:
    box = sandbox.open(
        BoxSpec(name="check-1", checkout=tmp_path, env=worker_env(hub), network=False)
    )
    try:
        port = int(hub.url.rsplit(":", 1)[1])
        probe = (
            f"import socket\ntry:\n socket.create_connection(('127.0.0.1', {port}), 3)\n"
            " print('REACHED')\nexcept OSError as e:\n print('refused', e)"
        )
        done = run(box, ["python3", "-c", probe], timeout=60, merge_stderr=True)
        assert "REACHED" not in done.stdout and "refused" in done.stdout
    finally:
        box.close()


PROBE = (  # prints, for each host:port named, what a TCP connection to it got
    "import socket, sys\n"
    "for where in sys.argv[1:]:\n"
    "    host, port = where.rsplit(':', 1)\n"
    "    try:\n"
    "        socket.create_connection((host, int(port)), 5).close()\n"
    "        print(where, 'REACHED')\n"
    "    except OSError as exc:\n"
    "        print(where, 'failed', exc)\n"
)


def listening(host: str = "127.0.0.1", answer: bytes = b"host service\n") -> socket.socket:
    """A TCP service of the host's that answers every connection with `answer`."""
    listener = socket.create_server((host, 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return listener


def reached(output: str) -> set[str]:
    return {line.split()[0] for line in output.splitlines() if line.endswith(" REACHED")}


def test_a_box_reaches_the_hub_and_nothing_else_of_the_network(
    sandbox: Sandbox, hub: BackgroundHub, tmp_path: Path
) -> None:
    env = {**worker_env(hub), "GIT_AUTHOR_NAME": "w1", "GIT_AUTHOR_EMAIL": "w1@swarm.invalid",
           "GIT_COMMITTER_NAME": "w1", "GIT_COMMITTER_EMAIL": "w1@swarm.invalid"}  # fmt: skip
    checkout = tmp_path / "w1"
    auth = f"http.extraHeader=Authorization: Bearer {env['SWARM_TOKEN']}"
    clone = ["git", "clone", "-q", "-c", auth, f"{hub.url}/git/workspace.git", str(checkout)]
    subprocess.run(clone, check=True, capture_output=True)
    service = listening()  # another service on the host's loopback
    others = [f"127.0.0.1:{service.getsockname()[1]}", "127.0.0.1:5432", "1.1.1.1:443"]
    host_reaches = subprocess.run(
        [sys.executable, "-c", PROBE, *others[:2]], capture_output=True, text=True
    )
    assert others[0] in reached(host_reaches.stdout)  # it is there, for the host
    box = sandbox.open(BoxSpec(name="w1", checkout=checkout, env=env))
    try:
        script = (
            "sw whoami && git fetch -q origin && echo FETCHED && git commit -q --allow-empty "
            "-m net && git push -q origin HEAD:refs/heads/w1/net && echo PUSHED; "
            'python3 -c "$0" "$@"'
        )
        done = run(box, ["bash", "-c", script, PROBE, *others], timeout=60, merge_stderr=True)
    finally:
        box.close()
        service.close()
    assert "you are w1" in done.stdout and "FETCHED" in done.stdout, done.stdout
    assert "PUSHED" in done.stdout, done.stdout
    pushed = subprocess.run(
        ["git", "--git-dir", str(hub.runtime.settings.run_dir / "workspace.git"), "log", "-1",
         "--format=%s", "w1/net"], capture_output=True, text=True,
    )  # fmt: skip
    assert pushed.stdout.strip() == "net"  # the push reached the hub's repository
    # The host's PostgreSQL (trust auth on loopback), the test's service, the internet: none.
    assert reached(done.stdout) == set(), done.stdout
    assert all(f"{where} failed" in done.stdout for where in others), done.stdout


def test_a_hub_off_loopback_is_on_the_boxs_loopback_inside(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    # 127.0.0.2 stands in for another machine: the box has no route there, only its relay.
    requests: list[bytes] = []
    listener = socket.create_server(("127.0.0.2", 0))
    port = listener.getsockname()[1]

    def answer() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                requests.append(conn.recv(4096))
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    env = {**base_env(), "SWARM_HUB_URL": f"http://127.0.0.2:{port}/"}
    box = sandbox.open(BoxSpec(name="w1", checkout=tmp_path, env=env))
    try:
        done = bash(
            box,
            f"echo $SWARM_HUB_URL; git ls-remote http://127.0.0.2:{port}/git/workspace.git 2>&1;"
            f" python3 -c \"import socket; socket.create_connection(('127.0.0.2', {port}), 5)\""
            " 2>&1 | tail -1",
        )
    finally:
        box.close()
        listener.close()
    assert done.stdout.splitlines()[0] == f"http://127.0.0.1:{port}/", done.stdout
    assert any(r.startswith(b"GET /git/workspace.git/info/refs") for r in requests), requests
    assert "Error" in done.stdout.splitlines()[-1], done.stdout  # never there directly


def test_a_file_past_the_size_limit_is_refused(sandbox: Sandbox, tmp_path: Path) -> None:
    limits = SandboxLimits(file_size_mb=8)
    box = sandbox.open(BoxSpec(name="w1", checkout=tmp_path, env=base_env(), limits=limits))
    try:
        done = bash(box, "dd if=/dev/zero of=big bs=1M count=64 2>&1; echo status $?")
        assert "status 0" not in done.stdout
        assert (tmp_path / "big").stat().st_size <= 8 * 1024 * 1024
    finally:
        box.close()


def test_past_the_disk_quota_the_command_is_stopped_and_told_why(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    limits = SandboxLimits(disk_mb=32, file_size_mb=16)
    box = sandbox.open(BoxSpec(name="w1", checkout=tmp_path, env=base_env(), limits=limits))
    try:
        # 4 GB in 8 MB files, slowly enough that the watcher looks several times meanwhile.
        fill = "for i in $(seq 1 500); do dd if=/dev/urandom of=f$i bs=1M count=8 2>/dev/null; done"
        started = time.monotonic()
        done = bash(box, fill, timeout=600)
        assert time.monotonic() - started < 300
        assert "[sandbox] stopped: the checkout uses" in done.stdout
        assert "quota of 32 MB" in done.stdout and done.returncode != 0
        used = sum(p.stat().st_size for p in tmp_path.glob("f*"))
        assert used < 32 * 1024 * 1024 + 64 * 1024 * 1024 + 200 * 1024 * 1024, used
        for path in tmp_path.glob("f*"):
            path.unlink()
        assert bash(box, "echo free again").stdout == "free again\n"  # no notice twice
    finally:
        box.close()


def test_a_fork_bomb_meets_the_process_limit(sandbox: Sandbox, tmp_path: Path) -> None:
    limits = SandboxLimits(processes=64)
    box = sandbox.open(BoxSpec(name="w1", checkout=tmp_path, env=base_env(), limits=limits))
    try:
        bomb = "timeout 10 bash -c 'f() { f | f & }; f' 2>&1 | head -c 2000; echo end"
        done = bash(box, bomb, timeout=120)
        assert "Resource temporarily unavailable" in done.stdout, done.stdout
        assert bash(box, "echo alive").stdout == "alive\n"
    finally:
        box.close()


def test_bad_limits_in_the_environment_are_named() -> None:
    with pytest.raises(InvalidInput, match="SWARM_SANDBOX_DISK_MB='lots'"):
        SandboxLimits.from_env({"SWARM_SANDBOX_DISK_MB": "lots"})
    assert SandboxLimits.from_env({"SWARM_SANDBOX_PROCESSES": "64"}).processes == 64


# -- the merge check ----------------------------------------------------------------------------
def tree_of(path: Path, files: dict[str, str]) -> tuple[pygit2.Repository, pygit2.Oid]:
    repo = pygit2.init_repository(str(path), bare=True)
    builder = repo.TreeBuilder()
    for name, text in files.items():
        builder.insert(name, repo.create_blob(text.encode()), pygit2.GIT_FILEMODE_BLOB)
    return repo, builder.write()


def test_the_merge_check_cannot_print_the_hubs_secrets_or_reach_it(
    sandbox: Sandbox, hub: BackgroundHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PR's file, run by the merge check, tries to print the hub's environment, its tokens
    and the operator token's file, and to call the hub."""
    monkeypatch.setenv("SWARM_OPERATOR_TOKEN", SECRET)  # as the hub process holds it
    token_file = tmp_path / "run" / "operator.token"
    port = int(hub.url.rsplit(":", 1)[1])
    leak = (
        "env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'; "
        f"cat {token_file} ../operator.token; "
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3); "
        "print('HUB REACHED')\"; exit 1"
    )
    repo, tree = tree_of(tmp_path / "repo.git", {"leak.sh": leak})
    with pytest.raises(CheckFailed) as failed:
        run_check(repo, tree, "sh leak.sh", 120, 7, sandbox)
    output = failed.value.output
    assert "SWARM_MERGE_PR=7" in output  # the check ran, and printed its environment
    assert SECRET not in output and hub.runtime.operator_token not in output
    assert "SWARM_OPERATOR_TOKEN" not in output and "SWARM_TOKEN" not in output
    assert "HUB REACHED" not in output
    assert SECRET not in str(failed.value)


def test_the_merge_check_passes_and_times_out_in_its_box(sandbox: Sandbox, tmp_path: Path) -> None:
    repo, tree = tree_of(tmp_path / "repo.git", {"ok.sh": "test -f ok.sh", "slow.sh": "sleep 60"})
    run_check(repo, tree, "sh ok.sh", 120, 1, sandbox)
    with pytest.raises(CheckFailed, match="timed out after 3s"):
        run_check(repo, tree, "sh slow.sh", 3, 2, sandbox)


# -- the docker backend's own guarantees ----------------------------------------------------------
@pytest.mark.docker
@pytest.mark.slow
def test_a_docker_box_has_no_capabilities_no_socket_and_no_network_but_the_hub(
    docker_engine: None, hub: BackgroundHub, tmp_path: Path
) -> None:
    upstream = socket.create_server(("127.0.0.1", 0))  # a host service the box must not reach
    threading.Thread(target=lambda: upstream.accept(), daemon=True).start()
    spec = BoxSpec(name="w1", checkout=tmp_path, env=worker_env(hub))
    box = get_sandbox("docker").open(spec)
    try:
        done = bash(
            box,
            "grep -E '^Cap(Eff|Bnd)' /proc/self/status; ls /var/run/docker.sock 2>&1; "
            "cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max 2>/dev/null; "
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
            f'{upstream.getsockname()[1]}), 3)" 2>&1 | tail -1; '
            "python3 -c \"import socket; socket.create_connection(('pypi.org', 443), 3)\" "
            "2>&1 | tail -1; sw whoami",
        )
        lines = done.stdout
        assert "CapEff:\t0000000000000000" in lines and "CapBnd:\t0000000000000000" in lines
        assert "No such file" in lines and "512" in lines
        assert lines.count("Error") >= 2 or "refused" in lines.lower()
        assert "you are w1" in lines
    finally:
        box.close()
        upstream.close()


@pytest.mark.docker
@pytest.mark.slow
def test_a_docker_box_ends_when_the_process_that_opened_it_is_killed(
    docker_engine: None, tmp_path: Path
) -> None:
    """No `--die-with-parent` for a container: its relay holds a connection to the owner's
    process, and exits (the container with it) when that process dies, even by SIGKILL."""
    import docker

    opener = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from swarm.sandbox import BoxSpec, get_sandbox\n"
        "from swarm.sandbox.env import base_env\n"
        "spec = BoxSpec(name='w1', checkout=Path(sys.argv[1]), env=base_env())\n"
        "box = get_sandbox('docker').open(spec)\n"
        "print(box.container.id, flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", opener, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    client, container_id = docker.from_env(), ""
    try:
        assert owner.stdout is not None
        container_id = owner.stdout.readline().strip()
        assert container_id, "the box did not open"
        assert client.containers.get(container_id).status == "running"
        since = int(time.time()) - 1
        owner.kill()
        owner.wait()
        # The container's end, from the Engine's events: its relay exits by itself (exit code
        # 0). A peer's sweep of orphaned boxes may remove it meanwhile, but that kills it first
        # (exit code 137), so it does not pass for this.
        events = client.events(
            since=since, until=since + 62, filters={"container": container_id}, decode=True
        )
        first = None
        for event in events:
            if event.get("Action") in ("kill", "die"):
                first = event
                break
        events.close()
        assert first is not None, "the container outlived its owner by 60 s"
        assert first["Action"] == "die", f"killed, not ended by itself: {first}"
        assert first["Actor"]["Attributes"].get("exitCode") == "0", first
    finally:
        owner.kill()
        if container_id:
            client.containers.get(container_id).remove(force=True)


def test_a_cli_agents_box_reaches_its_model_api_through_its_proxy_only(
    sandbox: Sandbox, hub: BackgroundHub, tmp_path: Path
) -> None:
    # A loopback server stands in for the model API's host (as a local model server would be).
    model = listening(answer=b"model api here\n")
    port = model.getsockname()[1]
    spec = BoxSpec(name="w1", checkout=tmp_path, env=worker_env(hub), reach=(f"127.0.0.1:{port}",))
    box = sandbox.open(spec)
    talk = (
        "import os, socket, sys\n"
        "proxy = os.environ['HTTPS_PROXY'].rsplit(':', 1)\n"
        "s = socket.create_connection(('127.0.0.1', int(proxy[1])), 5)\n"
        "s.sendall(f'CONNECT {sys.argv[1]} HTTP/1.1\\r\\n\\r\\n'.encode())\n"
        "print(s.recv(4096).decode(errors='replace')); print(s.recv(4096).decode())\n"
    )
    try:
        allowed = run(box, ["python3", "-c", talk, f"127.0.0.1:{port}"], timeout=60)
        assert "200 Connection established" in allowed.stdout, allowed.stdout + allowed.stderr
        assert "model api here" in allowed.stdout
        for other in ("127.0.0.1:5432", f"127.0.0.1:{hub.url.rsplit(':', 1)[1]}", "1.1.1.1:443"):
            refused = run(box, ["python3", "-c", talk, other], timeout=60)
            assert "403 Forbidden" in refused.stdout and "model api here" not in refused.stdout
        # A model server on the host's loopback (plain HTTP, not proxied) is at its own port.
        direct = run(box, ["python3", "-c", PROBE, f"127.0.0.1:{port}"], timeout=60)
        assert reached(direct.stdout) == {f"127.0.0.1:{port}"}, direct.stdout + direct.stderr
    finally:
        box.close()
        model.close()


@pytest.mark.docker
@pytest.mark.slow
def test_docker_says_what_is_missing(docker_engine: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidInput, match=r"no image swarm-nonexistent:0 .*build-sandbox-image"):
        get_sandbox("docker", image="swarm-nonexistent:0")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(InvalidInput, match=r"cannot reach a Docker engine.*--sandbox bwrap"):
        get_sandbox("docker")


def test_the_docker_backend_loads_only_when_chosen() -> None:
    code = "import swarm.sandbox, swarm.worker.runtime, sys; print('docker' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr
    assert os.path.exists(Path(__file__).parents[1] / "scripts" / "build-sandbox-image")


def test_where_commands_cannot_join_a_bwrap_boxs_network_it_says_so(
    hub: BackgroundHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from swarm.sandbox import bwrap

    def refused(fd: int, kind: int) -> None:  # as a kernel without setns for namespaces
        raise OSError(1, "setns: Operation not permitted")

    monkeypatch.setattr(bwrap, "_JOINS", [])
    monkeypatch.setattr(bwrap, "_setns", refused)
    with pytest.raises(InvalidInput, match=r"cannot put commands in .*Operation not permitted"):
        get_sandbox("bwrap").open(BoxSpec(name="w1", checkout=tmp_path, env=worker_env(hub)))


def test_a_box_runs_the_python_of_a_virtual_environment_under_tmp(tmp_path: Path) -> None:
    """A clone in a temporary folder has its .venv under /tmp: the box's private /tmp must not
    hide it (the README's demo scored `python: not found` from such a clone)."""
    venv = tmp_path / "clone" / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "outer.pth").write_text("\n".join(p for p in sys.path if p) + "\n")
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    code = (
        "from pathlib import Path\nfrom swarm.sandbox import BoxSpec, get_sandbox, run\n"
        f"spec = BoxSpec(name='w1', checkout=Path({str(checkout)!r}), network=False,\n"
        f"    env={{'PATH': {str(venv / 'bin')!r} + ':/usr/bin:/bin', 'HOME': '/tmp'}})\n"
        "box = get_sandbox('bwrap').open(spec)\n"
        "done = run(box, ['sh', '-c', 'python -c \"import sys; print(sys.prefix)\"'],\n"
        "           timeout=60, merge_stderr=True)\n"
        "print(done.returncode, done.stdout.strip())\n"
    )
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["0", str(venv)], done.stdout


def test_a_box_reaches_its_checkouts_git_server_when_it_is_not_the_hub(tmp_path: Path) -> None:
    """With Gitea as the workspace the checkout's origin is Gitea, not the hub: the box gets it
    forwarded to its loopback and git's URL rewritten to it (else `git push` inside a box with
    its own network cannot resolve the host)."""
    from swarm.sandbox.relay import Routes

    remote = "http://w1:secret@gitea:3000/swarm/task.git"
    pygit2.init_repository(str(tmp_path), origin_url=remote)
    spec = BoxSpec(name="w1", checkout=tmp_path, env={"SWARM_HUB_URL": "http://127.0.0.1:8765"})
    routes = Routes.of(spec)
    assert routes is not None
    assert routes.forwards == {8765: ("127.0.0.1", 8765), 3000: ("gitea", 3000)}
    env = routes.env(spec.env, ())
    assert env["SWARM_HUB_URL"] == "http://127.0.0.1:8765"  # on loopback: unchanged
    assert env["GIT_CONFIG_COUNT"] == "1"
    assert env["GIT_CONFIG_KEY_0"] == "url.http://w1:secret@127.0.0.1:3000/.insteadOf"
    assert env["GIT_CONFIG_VALUE_0"] == "http://w1:secret@gitea:3000/"
    # The embedded workspace: the origin is the hub, nothing more is forwarded.
    hub_origin = tmp_path / "embedded"
    pygit2.init_repository(str(hub_origin), origin_url="http://127.0.0.1:8765/git/task.git")
    embedded = Routes.of(BoxSpec(name="w1", checkout=hub_origin, env=spec.env))
    assert embedded is not None and embedded.forwards == {8765: ("127.0.0.1", 8765)}
    assert "GIT_CONFIG_COUNT" not in embedded.env(spec.env, ())
