"""The dashboard in headless Chromium (Debian's, driven by Playwright) against a populated hub."""

from __future__ import annotations

import os
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
