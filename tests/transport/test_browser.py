"""rivet.js in a real browser: Debian's chromium driven by Playwright.

The page (tests/templates/rivet_test/browser.html) is served by daphne and
uses /static/django_rivet/rivet.js to connect, call an action and render
events. The server is then killed (-9); while it is down another daphne on
another port serves two more increments; when the first port is back, the
page must reconnect by itself and show the missed events, each once, in
order.
"""

import httpx
import pytest

from tests.support.browser import chromium, needs_chromium
from tests.support.servers import daphne_process, free_port, kill9, server_env

pytestmark = [pytest.mark.servers, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def env(django_db_blocker):
    # Read the test database settings before Playwright's event loop runs in
    # this thread (no ORM inside the sync_playwright block).
    with django_db_blocker.unblock():
        return server_env()


def events_of(page):
    return page.locator("#events li").all_inner_texts()


@needs_chromium
def test_rivet_js_connects_calls_and_replays_after_a_server_crash(env):
    from playwright.sync_api import expect

    port = free_port()
    with chromium() as browser:
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        with daphne_process(env, port=port) as (url, proc):
            page.goto(f"{url}/rivet-test/browser/?key=crash")
            expect(page.locator("#status")).to_have_text("connected")
            page.click("#increment")  # over the socket
            expect(page.locator("#events li")).to_have_text(["1:1"])
            # Over HTTP, through rivet.js as well.
            assert page.evaluate("window.rivet.actor.call('increment')") == 2
            expect(page.locator("#events li")).to_have_text(["1:1", "2:2"])
            kill9(proc)
            expect(page.locator("#status")).to_have_text("connecting")
        # Events happen while the page's server is down.
        with daphne_process(env) as (other, _):
            with httpx.Client() as http:
                for _ in range(2):
                    response = http.post(
                        f"{other}/rivet/actors/counter/actions/increment?key=crash",
                        json={"args": []},
                    )
                    assert response.status_code == 200
        with daphne_process(env, port=port):
            expect(page.locator("#status")).to_have_text("connected")
            expect(page.locator("#events li")).to_have_text(
                ["1:1", "2:2", "3:3", "4:4"]
            )
            page.click("#increment")
            expect(page.locator("#events li")).to_have_text(
                ["1:1", "2:2", "3:3", "4:4", "5:5"]
            )
            assert page.locator("#errors li").count() == 0
        assert errors == []


CALL_BIG = """async () => {
  try {
    await window.rivet.conn.call("increment", "x".repeat(70000));
    return "resolved";
  } catch (error) {
    return [error.qualifiedCode, error.metadata && error.metadata.limit];
  }
}"""


@needs_chromium
def test_rivet_js_fails_an_oversized_call_at_once(env):
    """Issue 12: no hang; the call fails with request/too_large, client or server."""
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page()
        with daphne_process(env) as (url, _):
            page.goto(f"{url}/rivet-test/browser/?key=big-frame")
            expect(page.locator("#status")).to_have_text("connected")
            assert page.evaluate("window.rivet.conn.maxFrameBytes") == 65536
            assert page.evaluate(CALL_BIG) == ["request/too_large", 65536]
            # Unaware of the limit, it gets the server's answer: an error
            # frame, then close 4413; the call fails with that error.
            page.evaluate("window.rivet.conn.maxFrameBytes = 1e9")
            assert page.evaluate(CALL_BIG) == ["request/too_large", 65536]
            expect(page.locator("#status")).to_have_text("connected")
            page.click("#increment")
            expect(page.locator("#events li")).to_have_text(["1:1"])
