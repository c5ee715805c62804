"""The one way the suite starts a browser: Debian's Chromium through Playwright.

``playwright install`` is never run (its downloads are blocked): Playwright
drives the system's ``chromium``. Playwright's sync API runs an event loop in
the calling thread, so tests do their ORM work outside the ``with`` block.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: How long ``expect(...)`` waits for the page (milliseconds). Playwright's
#: 5 s default is too short for a page whose server shares a busy machine;
#: a bound on a wait, not a timing check.
EXPECT_TIMEOUT_MS = 30_000

needs_chromium = pytest.mark.skipif(
    not shutil.which("chromium"), reason="chromium is not installed"
)


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Launch headless Chromium; yield the Playwright ``Browser``, closed on exit."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()
