"""The example project in headless Chromium, served as ``make run`` serves it.

``scripts/run.sh`` starts the example (daphne with the embedded worker,
SQLite, the in-memory channel layer) on a database of the test's own; two
browser contexts (two people, no shared cookies) chat in a room, and orders
are driven to their end through their pages.
"""

import re
import uuid

import pytest

from tests.support.browser import chromium, needs_chromium
from tests.support.servers import example_server

pytestmark = [
    pytest.mark.servers,
    needs_chromium,
]


@pytest.fixture(scope="module")
def example_login(tmp_path_factory):
    """``(url, user, password)`` of the example, as the banner gives them."""
    with example_server(tmp_path_factory.mktemp("example")) as started:
        yield started


@pytest.fixture(scope="module")
def example(example_login):
    return example_login[0]


@pytest.fixture
def browser():
    with chromium() as browser:
        yield browser


# Chromium's offline emulation (context.set_offline) leaves open WebSockets
# alone, so the pages get a switch of their own: window.__goOffline() closes
# the open sockets and tells rivet.js they were lost (close code 1006, as a
# dropped network gives; a clean close would be final), and while
# window.__offline is set new sockets go to a closed port, so rivet.js keeps
# retrying.
NETWORK_SWITCH = """
window.__offline = false;
window.__sockets = [];
const RealWebSocket = window.WebSocket;
window.WebSocket = class extends RealWebSocket {
  constructor(url, protocols) {
    super(window.__offline ? "ws://127.0.0.1:9/" : url, protocols);
    window.__sockets.push(this);
  }
};
window.__goOffline = () => {
  window.__offline = true;
  for (const socket of window.__sockets) {
    const lost = socket.onclose;
    socket.onclose = null;
    socket.close();
    if (lost) lost.call(socket, new CloseEvent("close", { code: 1006 }));
  }
  window.__sockets = [];
};
"""


def page_of(browser, errors):
    context = browser.new_context()
    context.add_init_script(NETWORK_SWITCH)
    page = context.new_page()
    page.on("pageerror", lambda error: errors.append(str(error)))
    return context, page


def join(page, room_url, nickname):
    page.goto(room_url)
    page.fill("#nickname", nickname)
    page.click("#join button")


def say(page, text):
    page.fill("#text", text)
    page.press("#text", "Enter")


def test_two_people_chat_and_one_catches_up_after_losing_the_network(example, browser):
    from playwright.sync_api import expect

    errors = []
    room = f"{example}/chat/acme/room-{uuid.uuid4().hex[:8]}/"
    _, ann = page_of(browser, errors)
    _, bob = page_of(browser, errors)
    for page, nickname in [(ann, "ann"), (bob, "bob")]:
        join(page, room, nickname)
        expect(page.locator("#status")).to_have_text("connected")
        expect(page.locator("#talk")).to_be_visible()

    say(ann, "hello bob")
    expect(bob.locator("#messages li")).to_have_text(["ann: hello bob"])
    say(bob, "hi ann")
    expect(ann.locator("#messages li")).to_have_text(["ann: hello bob", "bob: hi ann"])

    # Bob's network drops; what Ann says meanwhile reaches him on reconnect.
    bob.evaluate("window.__goOffline()")
    expect(bob.locator("#status")).to_have_text("connecting")
    say(ann, "are you there?")
    expect(ann.locator("#messages li")).to_have_count(3)
    expect(bob.locator("#messages li")).to_have_count(2)
    bob.evaluate("window.__offline = false")
    expect(bob.locator("#status")).to_have_text("connected")
    expect(bob.locator("#messages li")).to_have_text(
        ["ann: hello bob", "bob: hi ann", "ann: are you there?"]
    )

    # A newcomer without a nickname is refused by on_before_connect, and
    # someone joining later sees the recent messages.
    _, eve = page_of(browser, errors)
    join(eve, room, "   ")
    expect(eve.locator("#error")).to_have_text("Pick a nickname to join")
    expect(eve.locator("#status")).to_have_text("disconnected")
    join(eve, room, "eve")
    expect(eve.locator("#messages li")).to_have_count(3)
    assert errors == []


def place(page, example, item, price):
    page.goto(f"{example}/orders/")
    page.fill("#item", item)
    page.fill("#price", price)
    page.click("#place button")
    page.wait_for_url(re.compile(r"/orders/\d+/$"))


def test_orders_are_approved_or_rejected_through_their_pages(example, browser):
    from playwright.sync_api import expect

    errors = []
    _, approved = page_of(browser, errors)
    _, rejected = page_of(browser, errors)
    place(approved, example, "Browser teapot", "12.50")
    place(rejected, example, "Browser kettle", "30")
    for page in (approved, rejected):
        expect(page.locator("#status")).to_have_text("sleeping")
        # After the cool-off the workflow waits for the decision message.
        expect(page.locator("#summary")).to_have_text("Waiting for approval.")

    approved.fill("#by", "ann")
    approved.click("#approve")
    rejected.fill("#by", "bob")
    rejected.click("#reject")

    expect(approved.locator("#status")).to_have_text("completed")
    expect(approved.locator("#summary")).to_have_text(
        re.compile(r"^Shipped with LABEL-\d{6}, approved by ann\.$")
    )
    expect(approved.locator("#history tr td:first-child")).to_have_text(
        [
            "start",
            "charge",
            "cool-off",
            "decision",
            "ship",
            "ship/label/print",
            "ship/email/send",
            "announce",
        ]
    )
    expect(approved.locator("#approve")).to_be_disabled()

    expect(rejected.locator("#status")).to_have_text("failed")
    expect(rejected.locator("#summary")).to_have_text(
        "Rejected by bob. The payment was refunded."
    )
    assert errors == []


def test_the_demo_login_from_the_banner_opens_the_admin(example_login, browser):
    from playwright.sync_api import expect

    url, user, password = example_login
    page = browser.new_page()
    page.goto(f"{url}/admin/")
    page.fill("#id_username", user)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    # The admin index (the login page has no app list), with rivet's models.
    expect(page).to_have_url(f"{url}/admin/")
    expect(page.locator("#content-main")).to_contain_text("Rivet actors and workflows")
