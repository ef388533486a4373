"""Headless Chromium for the dashboard tests (Debian `chromium`, driven by Playwright; no browser download): the
browser launched once, and a page in its own context with its console errors collected."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from support.servers import require_binary

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
TIMEOUT_MS = 30_000


@contextmanager
def chromium() -> Iterator[object]:
    """Headless Chromium (a fresh temporary profile each launch); skips where chromium or Playwright is missing."""
    executable = require_binary("chromium", "chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Page:
    """A page in its own context, with console errors collected."""

    def __init__(self, browser, url: str):  # noqa: ANN001 (Playwright's Browser)
        self.context = browser.new_context(viewport={"width": 1440, "height": 900})
        self.page = self.context.new_page()
        self.page.set_default_timeout(TIMEOUT_MS)
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        self.url = url

    def open(self, fragment: str = "") -> None:
        self.page.goto(self.url + "/" + fragment)
        self.page.wait_for_selector("body[data-ready='1']")

    def use_token(self, secret: str, role: str) -> None:
        self.page.fill("#token", secret)
        self.page.click("#token-form button[type=submit]")
        self.page.wait_for_selector(f"#whoami[data-role='{role}']")

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(ARTIFACTS / f"web-{name}.png"), full_page=True)

    def close(self) -> None:
        self.context.close()
