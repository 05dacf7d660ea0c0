"""`swarm report` and `swarm export` on a run populated through the hub's real API."""

from __future__ import annotations

import re
import subprocess
import tarfile
from pathlib import Path

import httpx
from click.testing import CliRunner
from test_dashboard_support import Population, populate, start_run

from swarm.bootstrap import build_runtime
from swarm.cli import main
from swarm.config import Settings
from swarm.hub.server import BackgroundHub
from swarm.report.measures import RunMeasures


def make_run(tmp_path: Path, name: str = "run", n: int = 4) -> tuple[Path, Population]:
    run_dir = tmp_path / name
    runtime = start_run(run_dir)
    with BackgroundHub(runtime) as hub:
        pop = populate(hub, tmp_path / f"{name}-clones", n=n)
    runtime.close()
    return run_dir, pop


def card(markdown: str, label: str) -> str:
    found = re.search(rf"^- {re.escape(label)}: \*\*(.+?)\*\*$", markdown, re.M)
    assert found, f"no card {label!r} in:\n{markdown}"
    return found.group(1)


def git_merges(git_dir: Path) -> int:
    command = ["git", "log", "--first-parent", "--merges", "--format=%s", "main"]
    log = subprocess.run(command, cwd=git_dir, capture_output=True, text=True, check=True).stdout
    return sum(1 for line in log.splitlines() if line.startswith("Merge PR #"))


def invoke(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_report_numbers_match_the_database(tmp_path: Path) -> None:
    run_dir, pop = make_run(tmp_path)
    invoke("report", str(run_dir))
    page = (run_dir / "report.html").read_text()
    summary = (run_dir / "report.md").read_text()
    assert page.count("<svg") >= 6 and 'src="http' not in page and 'href="http' not in page
    assert (
        int(card(summary, "merged PRs"))
        == len(pop.merged_prs)
        == git_merges(run_dir / "workspace.git")
    )
    assert int(card(summary, "merge commits on main")) == len(pop.merged_prs)
    assert card(summary, "final pass rate") == "80.0%"
    assert card(summary, "workers") == str(len(pop.workers))
    assert int(card(summary, "overlapping claim pairs")) == 3  # w1/w2, w1/w3, w2/w3
    assert int(card(summary, "merged by someone else")) == 1  # w2 merged w1's lexer
    assert int(card(summary, "reviews")) == 1
    assert "| w1 | w2 | 1 |" in summary  # DM graph: w1 wrote to w2 once
    assert re.search(r"\| w2 \| integrator \|", summary), summary


def test_export_opens_elsewhere_and_runs_compare(tmp_path: Path) -> None:
    run_dir, pop = make_run(tmp_path)
    archive = tmp_path / "out" / "run.tar.gz"
    invoke("export", str(run_dir), "-o", str(archive))
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "run/hub.db" in names and "run/workspace.bundle" in names and "run/run.toml" in names
    assert "run/operator.token" not in names
    invoke("report", str(archive), "-o", str(tmp_path / "from-archive.html"))
    summary = (tmp_path / "from-archive.md").read_text()
    assert int(card(summary, "merge commits on main")) == len(pop.merged_prs)

    unpacked = tmp_path / "elsewhere"
    invoke("export", str(archive), "--unpack", str(unpacked))
    runtime = build_runtime(Settings(run_dir=unpacked / "run"))
    with BackgroundHub(runtime) as hub:
        overview = httpx.get(f"{hub.url}/dashboard/api/overview").json()
        assert [w["name"] for w in overview["workers"]] == pop.workers
        assert overview["prs"]["merged"] == len(pop.merged_prs)
        pr = httpx.get(f"{hub.url}/dashboard/api/prs/{pop.merged_prs[0]}").json()
        assert "+def lex(text):" in pr["diff"]
    runtime.close()

    other, _ = make_run(tmp_path, "bigger", n=6)
    out = tmp_path / "cmp.html"
    invoke("report", str(run_dir), str(other), "-o", str(out), "--threshold", "0.5")
    compared = out.with_suffix(".md").read_text()
    assert "| run | 4 | 80.0% |" in compared and "| bigger | 6 | 80.0% |" in compared
    assert out.read_text().count("<svg") == 2


def _quiet_run() -> RunMeasures:
    """A run in which nothing happened yet: one worker, two sessions, no merges or messages."""
    return RunMeasures(
        name="quiet", start=1000.0, end=1000.0 + 300, workers=["w1"], checkpoints=[],
        merge_times=[], git_merges=0, claim_times=[1030.0, 1060.0, 1200.0], conflict_times=[],
        message_times=[], entries_by_type={}, per_worker={"w1": {"sessions": 2, "steps": 9,
        "tokens": 3, "cost": 0.0}}, session_costs=[0.0, 0.0], session_tokens=[1, 2],
        duplicated=[], overlaps=[], overlap_outcomes={}, claim_to_merge=[], reviews_given={},
        reviews_received={}, merged_whose={}, dm_graph={}, channel_posts={}, roles={},
    )  # fmt: skip


def _tick_labels(svg: str) -> list[str]:
    return re.findall(r"<text[^>]*>([^<]*)</text>", svg)


def test_charts_of_counts_have_whole_ticks_and_empty_charts_real_axes() -> None:
    from swarm.report import plots

    labels = _tick_labels(plots.cumulative(_quiet_run()))
    numbers = [x.replace("\u2212", "-") for x in labels if re.fullmatch(r"[\u2212\-]?[\d.]+", x)]
    assert numbers, labels
    assert not [x for x in numbers if x.startswith("-")], numbers  # no axis below zero
    assert "0.04" not in numbers and "0.02" not in numbers
    # Counts (claims: 3) tick in whole numbers (and the 5 minutes do too).
    assert all(float(x) == int(float(x)) for x in numbers), numbers


def test_number_columns_are_aligned_with_their_headers() -> None:
    from swarm.report.render import table

    made = table(["worker", "sessions", "cost ($)"], [["w1", 2, 0.5], ["w2", 10, 1.25]])
    assert made.numeric == [False, True, True]
    assert table(["a"], []).numeric == [False]


def test_tampered_and_incomplete_checkpoints_are_not_pass_rates(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    runtime = start_run(run_dir)
    with BackgroundHub(runtime) as hub:
        pop = populate(hub, tmp_path / "clones")
        last = pop.checkpoints[-1][0]
        op = httpx.Client(
            base_url=hub.url, headers={"Authorization": f"Bearer {hub.runtime.operator_token}"}
        )
        for k, (status, reason) in enumerate(
            [("tampered", "3 of 3 canary tests (tests that must fail) passed"),
             ("incomplete", "9 of the 10 hidden tests pinned by [check].tests")]
        ):  # fmt: skip
            answer = op.post("/v1/checkpoints", json={
                "time": last + 10 * (k + 1), "commit": f"{k + 7:040x}", "passed": 10,
                "total": 10, "reason": reason, "status": status})  # fmt: skip
            assert answer.status_code == 200, answer.text
        op.close()
    runtime.close()
    invoke("report", str(run_dir))
    summary = (run_dir / "report.md").read_text()
    # The forged 10/10 is neither the final nor the best pass rate.
    assert card(summary, "final pass rate") == "80.0%"
    assert card(summary, "best pass rate") == "80.0%"
    assert card(summary, "checkpoints not scored") == "1 tampered, 1 incomplete"
    assert "| tampered | 3 of 3 canary tests (tests that must fail) passed |" in summary
    assert "| incomplete | 9 of the 10 hidden tests pinned" in summary
    page = (run_dir / "report.html").read_text()
    assert "tampered (not a pass rate)" in page  # the cross on the curve, in its legend
