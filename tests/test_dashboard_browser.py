"""The dashboard in headless Chromium (Debian's, driven by Playwright) against a populated hub."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from test_dashboard_support import Population, populate, serve_run

from swarm.hub.server import BackgroundHub
from swarm.tools.client import HubClient

CHROMIUM = os.environ.get("SWARM_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium (or set SWARM_CHROMIUM)")
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def run_hub(tmp_path: Path) -> Iterator[BackgroundHub]:
    yield from serve_run(tmp_path)


@pytest.fixture
def populated(run_hub: BackgroundHub, tmp_path: Path) -> Population:
    return populate(run_hub, tmp_path)


def shot(page: Page, tmp_path: Path, name: str) -> None:
    folder = tmp_path / "screenshots"
    folder.mkdir(exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def test_pages_show_the_run(
    page: Page, run_hub: BackgroundHub, populated: Population, tmp_path: Path
) -> None:
    page.goto(f"{run_hub.url}/dashboard")
    rows = page.locator("#ov-workers tbody tr[data-worker]")
    expect(rows).to_have_count(len(populated.workers))
    for name in populated.workers:
        expect(page.locator(f'tr[data-worker="{name}"]')).to_be_visible()
    expect(page.locator("#ov-chart circle.dot")).to_have_count(len(populated.checkpoints))
    expect(page.locator("#ov-cards")).to_contain_text("80.0%")
    # The hidden tests still failing, each since the first scoring (none of them ever passed).
    expect(page.locator("#ov-tests-summary")).to_contain_text("2 of 10 hidden tests still failing")
    expect(page.locator("#ov-tests tr[data-test]")).to_have_count(2)
    expect(page.locator('tr[data-test="hidden/test_x.py::test_9"]')).to_contain_text("0000000")
    expect(page.locator('[data-count="Pull requests.merged"]')).to_have_text("1")
    shot(page, tmp_path, "overview")

    page.goto(f"{run_hub.url}/dashboard#/context")
    page.fill("input[name=pattern]", "zebra")
    page.click("#cx-form button.primary")
    expect(page.locator("#cx-list li[data-entry]")).to_have_count(1)
    expect(page.locator(f'li[data-entry="{populated.needle_entry}"]')).to_contain_text("zebra")
    shot(page, tmp_path, "context-grep")

    page.click(f'a[href="#/entry/{populated.needle_entry}"]')
    expect(page.locator("h1")).to_contain_text(f"Entry #{populated.needle_entry}")

    page.goto(f"{run_hub.url}/dashboard#/prs")
    expect(page.locator("#pr-table tr[data-pr]")).to_have_count(2)
    # Each PR's size: lines added and removed, files.
    expect(page.locator(f'[data-size="{populated.merged_prs[0]}"]')).to_contain_text("1 file")
    expect(page.locator(f'[data-size="{populated.merged_prs[0]}"] .add')).to_have_text(
        re.compile(r"\+[1-9]")
    )
    shot(page, tmp_path, "prs")
    page.click(f'#pr-table a[href="#/prs/{populated.merged_prs[0]}"] >> nth=0')
    expect(page.locator("#pr-diff .add").first).to_contain_text("+def lex(text):")
    shot(page, tmp_path, "pr")
    page.goto(f"{run_hub.url}/dashboard#/prs/{populated.conflicted_pr}")
    expect(page.locator("main")).to_contain_text("conflict")
    shot(page, tmp_path, "pr-conflict")

    page.goto(f"{run_hub.url}/dashboard#/claims")
    expect(page.locator("#cl-board .claim.overlap")).to_have_count(2)
    shot(page, tmp_path, "claims")

    page.goto(f"{run_hub.url}/dashboard#/chat")
    expect(page.locator("#ch-list")).to_contain_text("heads-up")
    page.click(f'#ch-threads a[href="#/chat/{populated.workers[0]}/{populated.workers[1]}"]')
    expect(page.locator("#ch-list .msg")).to_have_count(2)
    shot(page, tmp_path, "chat")

    page.goto(f"{run_hub.url}/dashboard#/workers/{populated.workers[0]}")
    expect(page.locator("#wk-list")).to_contain_text("Session 1")
    shot(page, tmp_path, "worker")

    # The session's transcript, as mini-swe-agent writes it (one message per step).
    sessions = run_hub.runtime.settings.run_dir / "workers" / "sessions"
    sessions.mkdir(parents=True)
    messages = [
        {"role": "system", "content": "You are w1, one of 4 identical workers"},
        {"role": "assistant", "content": "THOUGHT: look first\n```bash\nsw claims\n```"},
        {"role": "user", "content": [{"type": "text", "text": "<returncode>0</returncode> ok"}]},
    ]
    name = f"{populated.workers[0]}-session1.mini.traj.json"
    (sessions / name).write_text(json.dumps({"info": {}, "messages": messages}))
    page.click("#wk-list a[data-session='1']")
    expect(page.locator("#session-steps li.step")).to_have_count(3)
    expect(page.locator("#session-steps li.assistant")).to_contain_text("sw claims")
    expect(page.locator("#session-steps li.user")).to_contain_text("<returncode>0</returncode>")
    shot(page, tmp_path, "session")

    # Main's files and its diff against the start.
    page.goto(f"{run_hub.url}/dashboard#/code")
    lexer = page.locator('#code-files tr[data-file="src/parser/lexer.py"]')
    expect(lexer).to_contain_text("added")
    expect(lexer).to_contain_text("+2 −0")
    expect(page.locator("#code-diff")).to_contain_text("+def lex(text):")
    expect(page.locator("#code-stats")).to_contain_text("file")
    shot(page, tmp_path, "code")


def test_operator_posts_into_the_tasks_channel(
    page: Page, run_hub: BackgroundHub, populated: Population, tmp_path: Path
) -> None:
    page.goto(f"{run_hub.url}/dashboard")
    expect(page.locator("#op-body")).to_have_count(0)  # read-only without the token
    page.click("#token-button")
    page.fill("#token-input", run_hub.runtime.operator_token)
    page.click("#token-form button[value=save]")
    expect(page.locator("#token-button")).to_have_text("Operator ✓")
    page.fill("#op-body", "Everyone: focus on the parser error messages next.")
    page.click("#op-send")
    expect(page.locator("#op-result")).to_contain_text("posted message")
    shot(page, tmp_path, "operator")

    reader = populated.workers[2]
    with HubClient(run_hub.url, populated.tokens[reader]) as worker:
        digest = worker.inbox()["result"]["channel"]
    assert any(
        m["author"] == "operator" and "parser error messages" in m["body"] for m in digest
    ), digest

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#op-stop")
    expect(page.locator("#op-result")).to_have_text("stop requested")
    assert run_hub.runtime.run.stop_requested


def test_a_finished_run_says_when_and_why_it_ended(
    page: Page, run_hub: BackgroundHub, populated: Population, tmp_path: Path
) -> None:
    """`swarm run` writes `ended` and `stopped_because` into run.toml when it stops."""
    toml = tmp_path / "run" / "run.toml"
    top, _, budget = toml.read_text().partition("[budget]")
    toml.write_text(
        f'{top}ended = 1800000000.0\nstopped_because = "budget reached"\n[budget]{budget}'
    )
    page.goto(f"{run_hub.url}/dashboard")
    cards = page.locator("#ov-cards")
    expect(cards).to_contain_text("Ended")
    expect(cards).to_contain_text("budget reached")
    expect(cards).to_contain_text("final · 8/10")
    expect(cards).not_to_contain_text("Time left")
    expect(cards).not_to_contain_text("alive")
    expect(page.locator("#live")).to_have_text("■ ended")


def test_tampered_and_incomplete_scorings_are_not_pass_rates(
    page: Page, run_hub: BackgroundHub, populated: Population, tmp_path: Path
) -> None:
    """The evaluator's canaries and pins: such checkpoints are marks and rows, not points."""
    last = populated.checkpoints[-1][0]
    with HubClient(run_hub.url, run_hub.runtime.operator_token) as op:
        for k, (status, reason) in enumerate(
            [
                ("tampered", "3 of 3 canary tests (tests that must fail) passed"),
                ("incomplete", "1 hidden test module(s) did not collect: test_y.py"),
            ]
        ):
            op.call("POST", "/v1/checkpoints", json={
                "time": last + 10 * (k + 1), "commit": f"{9 - k:040x}", "passed": 10,
                "total": 10, "reason": reason, "status": status})  # fmt: skip
    page.goto(f"{run_hub.url}/dashboard")
    # The curve keeps the four real scores; the two others are marks on the time axis.
    expect(page.locator("#ov-chart circle.dot")).to_have_count(len(populated.checkpoints))
    expect(page.locator('#ov-chart g.mark[data-status="tampered"]')).to_have_count(1)
    expect(page.locator('#ov-chart g.mark[data-status="incomplete"]')).to_have_count(1)
    # The card shows the last pass rate (8/10), never the forged 10/10.
    cards = page.locator("#ov-cards")
    expect(cards).to_contain_text("80.0%")
    expect(cards).to_contain_text("newest: incomplete")
    expect(cards).not_to_contain_text("100.0%")
    summary = page.locator("#ov-checkpoints-summary")
    expect(summary).to_contain_text("6 checkpoints · 2 not pass rates")
    tampered = page.locator('#ov-checkpoints tr[data-checkpoint-status="tampered"]')
    expect(tampered).to_contain_text("canary tests (tests that must fail) passed")
    expect(tampered.locator("td.num")).to_have_text("—")
    incomplete = page.locator('#ov-checkpoints tr[data-checkpoint-status="incomplete"]')
    expect(incomplete).to_contain_text("did not collect: test_y.py")
    shot(page, tmp_path, "overview-tampered")
