"""The oracle: a task's original program, published into the run and run by the hub for
`sw oracle` in a sandbox of its own. Real hub on loopback, real bubblewrap, real programs
(coreutils' sort as an ELF oracle, a shell script as a wrapper oracle)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from swarm.bootstrap import build_runtime
from swarm.config import Settings
from swarm.hub.server import BackgroundHub
from swarm.sandbox import BoxSpec, get_sandbox
from swarm.sandbox import run as run_in_box
from swarm.sandbox.env import agent_env
from swarm.tasks.model import Task, load_task
from swarm.tasks.published import publish_task, read_published
from swarm.tasks.rebuild.oracle import OracleProgram, elf_interpreter, write_manifest
from swarm.tasks.rebuild.oracle_run import OracleLimits, OracleRequest, run_oracle
from swarm.tools.client import HubClient, HubError

SORT = Path(shutil.which("sort") or "/usr/bin/sort")
TOOL = """#!/bin/sh
# A wrapper oracle: no manifest, run as the script itself.
case "$1" in
  sleep) exec sleep "$2" ;;
  flood) exec yes ;;
  probe) ls /proc | wc -l; cat "$2" 2>&1 | head -c 200; echo; env | sort; exit 7 ;;
  *) exec sort "$@" ;;
esac
"""


def make_task(root: Path, *, elf: bool = True) -> Task:
    """A task whose oracle is a copy of sort with a manifest (elf) or a shell wrapper."""
    (root / "start").mkdir(parents=True)
    (root / "start" / "README.md").write_text("rebuild sort\n")
    (root / "hidden").mkdir()
    (root / "goal.md").write_text("Rebuild sort.\n")
    oracle = root / "oracle"
    oracle.mkdir()
    (oracle / "marker.txt").write_text("the oracle's own files, never shown to agents\n")
    if elf:
        shutil.copy(SORT, oracle / "sort")
        interpreter = elf_interpreter(oracle / "sort")
        program = OracleProgram(oracle, "sort", "sort", interpreter, "sort", (), (str(SORT),))
        write_manifest(program)
        name = "sort"
    else:
        (oracle / "tool").write_text(TOOL)
        (oracle / "tool").chmod(0o755)
        name = "tool"
    (root / "task.toml").write_text(
        f'name = "rebuild-{name}"\neval_command = "true"\noracle = "oracle/{name}"\n'
    )
    return load_task(root)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    publish_task(make_task(tmp_path / "task"), path, harness="mini", team_size=2)
    return path


def start_hub(run_dir: Path, **settings: Any) -> BackgroundHub:
    runtime = build_runtime(Settings(run_dir=run_dir, **settings))
    return BackgroundHub(runtime).start()


@pytest.fixture
def hub(run_dir: Path) -> Iterator[BackgroundHub]:
    server = start_hub(run_dir, rate_oracle_per_minute=0)
    yield server
    server.stop()
    server.runtime.close()


def worker(hub: BackgroundHub) -> HubClient:
    with HubClient(hub.url, hub.runtime.operator_token) as operator:
        token = operator.register()["token"]
    return HubClient(hub.url, token, retry_for=0)


def oracle(client: HubClient, *args: str, **fields: Any) -> dict[str, Any]:
    result: dict[str, Any] = client.call("POST", "/v1/oracle", json={"args": list(args), **fields})
    return result["result"]


def test_a_box_masks_a_copy_of_the_program_installed_on_the_machine(tmp_path: Path) -> None:
    checkout = tmp_path / "w1"
    checkout.mkdir()
    env = agent_env(hub_url="http://127.0.0.1:9", token="t", worker="w1")
    docs = Path("/usr/share/doc")
    probe = f"wc -c < {SORT}; ls {docs} | wc -l; {SORT} --version >/dev/null; echo status $?"
    sandbox = get_sandbox("bwrap")
    seen = {}
    for hidden in ((), (SORT, docs)):
        box = sandbox.open(BoxSpec(name="w1", checkout=checkout, env=env, hidden=hidden))
        try:
            seen[hidden] = run_in_box(box, ["sh", "-c", probe], timeout=60)
        finally:
            box.close()
    plain, masked = seen[()], seen[(SORT, docs)]
    assert int(plain.stdout.split()[0]) > 0 and "status 0" in plain.stdout, plain
    assert masked.stdout.split()[0] == "0" and "status 126" in masked.stdout, masked
    assert "Permission denied" in masked.stderr


def test_publishing_copies_the_oracle_into_the_run_and_names_only_the_program(
    run_dir: Path, tmp_path: Path
) -> None:
    published = read_published(run_dir)
    assert published["oracle"] == "sort"
    assert str(tmp_path / "task") not in json.dumps(published)  # no path to the task
    assert (run_dir / "oracle" / "sort").read_bytes() == SORT.read_bytes()
    manifest = json.loads((run_dir / "oracle" / "oracle.json").read_text())
    assert manifest["executable"] == "sort" and manifest["interpreter"].startswith("/")
    assert published["conceal"] == [str(SORT)]  # its installed paths, masked in agents' boxes
    # A task without an oracle publishes none (and removes an earlier run's copy).
    bare = tmp_path / "bare"
    make_task(bare)
    (bare / "task.toml").write_text('name = "bare"\neval_command = "true"\n')
    publish_task(load_task(bare), run_dir, harness="mini", team_size=1)
    assert read_published(run_dir)["oracle"] is None and not (run_dir / "oracle").exists()


def test_the_hub_runs_the_program_and_returns_what_it_printed(hub: BackgroundHub) -> None:
    me = worker(hub)
    got = oracle(me, "-r", stdin="b\na\nc\n")
    assert (got["exit_code"], got["stdout"], got["stderr"]) == (0, "c\nb\na\n", "")
    assert got["program"] == "sort" and not got["timed_out"] and not got["truncated"]
    missing = oracle(me, "no-such-file")
    assert missing["exit_code"] == 2 and "no-such-file: No such file" in missing["stderr"]
    # Files the call sends are in the program's working folder; bytes that are not text
    # travel as base64 both ways.
    data = base64.b64encode(b"zeta\nalpha\n").decode()
    assert oracle(me, "data.txt", files={"data.txt": data})["stdout"] == "alpha\nzeta\n"
    raw = b"\xff\xfe\n\x01\n"
    got = oracle(me, stdin_base64=base64.b64encode(raw).decode())
    assert base64.b64decode(got["stdout_base64"]) == b"\x01\n\xff\xfe\n"
    me.close()


def test_bad_input_is_refused_before_anything_runs(run_dir: Path) -> None:
    server = start_hub(run_dir, oracle_max_args=4, oracle_max_input_bytes=2048)
    me = worker(server)
    refusals = [
        ({"args": ["a"] * 5}, 422, "5 arguments; at most 4 (SWARM_ORACLE_MAX_ARGS)"),
        ({"args": ["x" * 70000]}, 413, "SWARM_ORACLE_MAX_ARG_BYTES"),
        ({"args": ["a\x00b"]}, 422, "NUL"),
        ({"stdin": "x" * 5000}, 413, "at most 2048 (SWARM_ORACLE_MAX_INPUT_BYTES)"),
        ({"files": {"../x": ""}}, 422, "a plain name"),
        ({"files": {"sub/x": ""}}, 422, "no folders"),
        ({"files": {"x": "%%%"}}, 422, "not valid base64"),
        ({"stdin": "a", "stdin_base64": "YQ=="}, 422, "not both"),
        ({"timeout": -1}, 422, "timeout"),
        ({"args": "-r"}, 422, "args"),
    ]
    try:
        for body, status, message in refusals:
            with pytest.raises(HubError) as caught:
                me.call("POST", "/v1/oracle", json=body)
            assert caught.value.status == status, (body, caught.value.message)
            assert message in caught.value.message, caught.value.message
    finally:
        me.close()
        server.stop()
        server.runtime.close()


def test_oracle_calls_are_rate_limited_per_worker(run_dir: Path) -> None:
    server = start_hub(run_dir, rate_oracle_per_minute=1, rate_burst=2)
    me, peer = worker(server), worker(server)
    try:
        oracle(me, stdin="x\n")
        oracle(me, stdin="x\n")
        with pytest.raises(HubError) as caught:
            oracle(me, stdin="x\n")
        assert caught.value.status == 429
        assert "SWARM_RATE_ORACLE_PER_MINUTE" in caught.value.message
        assert oracle(peer, stdin="y\n")["stdout"] == "y\n"  # a peer has its own bucket
    finally:
        me.close()
        peer.close()
        server.stop()
        server.runtime.close()


def test_a_run_without_an_oracle_says_so(tmp_path: Path) -> None:
    bare = tmp_path / "task"
    make_task(bare)
    (bare / "task.toml").write_text('name = "bare"\neval_command = "true"\n')
    publish_task(load_task(bare), tmp_path / "run", harness="mini", team_size=1)
    server = start_hub(tmp_path / "run")
    me = worker(server)
    try:
        with pytest.raises(HubError) as caught:
            oracle(me, "-r")
        assert caught.value.status == 404 and "no oracle" in caught.value.message
    finally:
        me.close()
        server.stop()
        server.runtime.close()


def test_the_program_cannot_reach_its_own_files_nor_the_run(hub: BackgroundHub) -> None:
    run_dir = hub.runtime.settings.run_dir
    me = worker(hub)
    secret = (run_dir / "oracle" / "sort").read_bytes()
    answers = [
        oracle(me, str(run_dir / "oracle" / "sort")),
        oracle(me, str(run_dir / "oracle" / "marker.txt")),
        oracle(me, "/proc/self/exe"),
        oracle(me, str(run_dir / "hub.db")),
    ]
    for answer in answers:
        assert answer["exit_code"] == 2 and "No such file" in answer["stderr"], answer
    text = json.dumps(answers)
    assert base64.b64encode(secret[4096:4160]).decode() not in text
    assert "never shown to agents" not in text
    me.close()


def test_a_wrapper_oracle_runs_confined_with_its_limits(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", elf=False)
    run_dir = tmp_path / "run"
    publish_task(task, run_dir, harness="mini", team_size=1)
    from swarm.tasks.rebuild.oracle import published_oracle

    program = published_oracle(run_dir)
    assert program is not None and program.interpreter is None and program.command == "tool"
    limits = OracleLimits(seconds=2, max_output_bytes=10000)
    probe = run_oracle(program, OracleRequest(("probe", str(run_dir / "task.json"))), limits)
    lines = probe.stdout.decode().splitlines()
    assert probe.exit_code == 7 and lines[0] == "0"  # no /proc at all
    assert "No such file" in lines[1]  # the run directory is not there
    env = dict(line.split("=", 1) for line in lines[2:] if "=" in line)
    assert env["HOME"] == "/tmp" and not any(k.startswith("SWARM") for k in env), env
    slow = run_oracle(program, OracleRequest(("sleep", "30")), limits)
    assert slow.timed_out and slow.exit_code is None and slow.seconds < 10
    flood = run_oracle(program, OracleRequest(("flood",)), limits)
    assert flood.truncated and flood.exit_code is None and len(flood.stdout) == 10000


def sw(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "sw"), "oracle", *args],
        input=stdin, capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


def test_sw_oracle_prints_the_output_and_exits_with_the_programs_status(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    publish_task(make_task(tmp_path / "task", elf=False), run_dir, harness="mini", team_size=1)
    server = start_hub(run_dir, oracle_timeout_seconds=2, oracle_max_args=8)
    me = worker(server)
    env = {"SWARM_HUB_URL": server.url, "SWARM_TOKEN": me.token or "", "PATH": "/usr/bin:/bin"}
    env["SWARM_HUB_RETRY_SECONDS"] = "0"
    try:
        done = sw(env, "-r", stdin="a\nb\n")
        assert (done.returncode, done.stdout) == (0, "b\na\n")
        done = sw(env, "missing")
        assert done.returncode == 2 and "missing: No such file" in done.stderr
        done = sw(env, "sleep", "20")
        assert done.returncode == 124 and "ran past 2s and was stopped" in done.stderr
        done = sw(env, *["x"] * 9)
        assert done.returncode == 125 and "sw: error: 9 arguments; at most 8" in done.stderr
        done = sw(env, "--", "--version")  # an argument that looks like sw's own option
        assert done.returncode == 0 and "sort" in done.stdout
    finally:
        me.close()
        server.stop()
        server.runtime.close()


def test_an_agent_in_bwrap_runs_the_oracle_but_cannot_read_it(hub: BackgroundHub) -> None:
    run_dir = hub.runtime.settings.run_dir
    me = worker(hub)
    checkout = run_dir.parent / "w1"
    checkout.mkdir()
    (checkout / "words.txt").write_text("pear\napple\n")
    env = agent_env(hub_url=hub.url, token=me.token or "", worker="w1")
    box = get_sandbox("bwrap").open(BoxSpec(name="w1", checkout=checkout, env=env))
    try:
        done = run_in_box(box, ["sh", "-c", "sw oracle < words.txt"], timeout=120)
        assert (done.returncode, done.stdout) == (0, "apple\npear\n"), done.stderr
        for path in (run_dir / "oracle" / "sort", run_dir / "oracle" / "marker.txt", run_dir):
            seen = run_in_box(box, ["cat", str(path)], timeout=60)
            assert seen.returncode != 0 and "No such file" in seen.stderr, seen
        # Beside the checkout are the run directory and the task: inside, only the checkout.
        listed = run_in_box(box, ["ls", str(run_dir.parent)], timeout=60)
        assert listed.stdout.split() == ["w1"], listed
    finally:
        box.close()
        me.close()


def test_a_sandbox_that_cannot_start_is_the_hubs_error_not_the_programs_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container without bubblewrap's seccomp profile: bwrap fails before the program runs."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("SWARM_BWRAP_BIN", str(fake))
    run_dir = tmp_path / "run"
    publish_task(make_task(tmp_path / "task"), run_dir, harness="mini", team_size=1)
    from swarm.errors import Unavailable
    from swarm.tasks.rebuild.oracle import published_oracle

    program = published_oracle(run_dir)
    assert program is not None
    with pytest.raises(Unavailable, match=r"cannot sandbox the oracle: bwrap: No permissions.*"
                       r"seccomp profile.*SWARM_ORACLE_SANDBOX=none"):  # fmt: skip
        run_oracle(program, OracleRequest(("-r",), b"a\n"))
    # A program that itself fails is its own output (exit 2), not the hub's error.
    monkeypatch.delenv("SWARM_BWRAP_BIN")
    failed = run_oracle(program, OracleRequest(("no-such-file",)))
    assert failed.exit_code == 2 and failed.stderr.startswith(b"sort: ")


def test_oracle_answers_are_not_kept_as_idempotent_replays(hub: BackgroundHub) -> None:
    """An oracle run changes nothing, and its answer can be megabytes: a retry runs it again
    instead of being answered from the idempotency store (a grep-like read, not a write)."""
    import httpx

    me = worker(hub)
    headers = {"Authorization": f"Bearer {me.token}", "Idempotency-Key": "k-1"}
    body = {"args": ["-r"], "stdin": "a\nb\n"}
    with httpx.Client(base_url=hub.url, timeout=60) as http:
        first = http.post("/v1/oracle", json=body, headers=headers)
        again = http.post("/v1/oracle", json=body, headers={**headers, "Idempotency-Attempt": "2"})
        # An ordinary write is replayed, so the store is at work here.
        entry = {"type": "OBSERVED", "body": "x"}
        http.post("/v1/entries", json=entry, headers={**headers, "Idempotency-Key": "k-2"})
        replayed = http.post(
            "/v1/entries", json=entry,
            headers={**headers, "Idempotency-Key": "k-2", "Idempotency-Attempt": "2"},
        )  # fmt: skip
    assert first.status_code == again.status_code == 200
    assert "idempotent-replay" not in again.headers and again.json()["result"]["stdout"] == "b\na\n"
    assert replayed.headers.get("idempotent-replay") == "true"
    me.close()
