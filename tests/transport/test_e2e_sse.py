"""Server-Sent Events through real servers: daphne, Redis, Chromium with rivet.js.

One daphne for the module, on the test database and a real Redis channel
layer; workflows run in this process (a worker thread), whose commits reach
daphne's readers through Redis. Readers disconnect and resume with
``Last-Event-ID``; a reader that stops reading is cut off; the actor events
route gives what a WebSocket gives; and rivet.js follows a stream in
Chromium through a server killed (``kill -9``) mid-stream.
"""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from django.test import override_settings

from django_rivet import workflows
from django_rivet.client import Client
from django_rivet.testing import run_until_idle
from tests.support.browser import chromium, needs_chromium
from tests.support.polling import await_for, wait_for
from tests.support.servers import daphne_process, free_port, kill9, server_env
from tests.support.sse import Message, Parser
from tests.support.threads import run_in_background

pytestmark = [pytest.mark.servers, pytest.mark.django_db(transaction=True)]

# Fast keep-alives and a short slow-reader bound (tests/settings/load.py).
SERVER_RIVET = {"SSE_KEEPALIVE_INTERVAL": 1, "SLOW_CONSUMER_TIMEOUT": 1}


@pytest.fixture(scope="module")
def server_env_extra(redis_url):
    return {
        "RIVET_TEST_REDIS_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "tests.settings.load",
        "RIVET_LOAD_RIVET": json.dumps(SERVER_RIVET),
    }


@pytest.fixture
def redis_layer(redis_url):
    """This process announces its commits through the servers' Redis."""
    layer = {"BACKEND": "channels_redis.core.RedisChannelLayer"}
    layer["CONFIG"] = {"hosts": [redis_url]}
    with override_settings(CHANNEL_LAYERS={"default": layer}):
        yield


def read_sse(url: str, headers: dict[str, str], stop_after: int | None = None):
    """Read messages until ``close`` (or ``stop_after`` values: then hang up)."""
    parser, values = Parser(), []
    with httpx.stream("GET", url, headers=headers, timeout=60) as response:
        assert response.status_code == 200
        for chunk in response.iter_raw():
            for message in parser.feed(chunk):
                if message.event == "close":
                    return values, True
                values.append(message)
                if stop_after is not None and len(values) >= stop_after:
                    return values, False
    return values, False


def test_a_thousand_values_through_two_disconnects(server, redis_layer):
    workflows.start(
        "streamer", {"count": 1000, "every": 25, "delay": 0.05}, id="e2e-1000"
    )
    thread = run_in_background("e2e-1000")
    url = f"{server}/rivet/workflows/e2e-1000/streams/n"
    got: list[Message] = []
    try:
        for stop_after in (300, 300, None):
            headers = {"Last-Event-ID": str(got[-1].id)} if got else {}
            values, closed = read_sse(url, headers, stop_after)
            got += values
        assert closed
    finally:
        thread.join(60)
    assert [m.id for m in got] == list(range(1, 1001))
    assert [m.data for m in got] == list(range(1000))


def test_a_reader_that_stops_reading_is_cut_off_then_resumes(server):
    handle = workflows.start("streamer", {"count": 150, "pad": 64 * 1024}, id="slow")
    assert run_until_idle(handle) == "completed"
    host, port = server.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(
        f"GET /rivet/workflows/slow/streams/n HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    )
    time.sleep(SERVER_RIVET["SLOW_CONSUMER_TIMEOUT"] + 1.5)  # it reads nothing
    received, reset = b"", False
    sock.settimeout(10)
    try:
        while chunk := sock.recv(1 << 16):
            received += chunk
    except ConnectionResetError:  # aborted: what it had not read is gone
        reset = True
    sock.close()
    # Cut off (reset, or ended without its close) well before the 10 MB the
    # stream holds.
    assert reset or b"event: close" not in received
    assert len(received) < 4 * 1024 * 1024
    ids = [int(line[4:]) for line in received.split(b"\n") if line.startswith(b"id: ")]
    last = max(ids, default=0)
    values, closed = read_sse(
        f"{server}/rivet/workflows/slow/streams/n", {"Last-Event-ID": str(last)}
    )
    assert closed and [m.id for m in values] == list(range(last + 1, 151))


async def test_actor_events_over_sse_are_the_websocket_s(server):
    client = Client(f"{server}/rivet")
    conn = await client.actor("counter", "sse-ws").connect(subscribe="*")
    from_ws = []
    conn.on("changed", lambda count: from_ws.append((conn.last_seq, count)))
    await conn.call("getCount")
    from_sse: list[Message] = []
    parser = Parser()
    url = f"{server}/rivet/actors/counter/events?key=sse-ws&subscribe=changed"
    async with httpx.AsyncClient(timeout=60) as http:
        async with http.stream("GET", url) as response:
            chunks = response.aiter_raw()
            while not parser.messages:
                parser.feed(await anext(chunks))
            assert parser.messages[0].event == "init"
            for _ in range(50):
                await client.actor("counter", "sse-ws").acall("increment")
            while len([m for m in parser.messages if m.event == "changed"]) < 50:
                parser.feed(await anext(chunks))
    from_sse = [(m.id, m.data[0]) for m in parser.messages if m.event == "changed"]
    await await_for(lambda: len(from_ws) == 50, what="the WebSocket's events")
    assert from_sse == from_ws == [(seq, seq) for seq in range(1, 51)]
    await conn.close()
    await client.aclose()


@needs_chromium
def test_rivet_js_follows_a_stream_through_a_killed_server(
    django_db_blocker, redis_url, redis_layer
):
    from playwright.sync_api import expect

    with django_db_blocker.unblock():
        env = server_env(RIVET_TEST_REDIS_URL=redis_url)
        workflows.start(
            "streamer", {"count": 1000, "every": 20, "delay": 0.05}, id="browser-1000"
        )
    port = free_port()
    with chromium() as browser:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        with daphne_process(env, port=port) as (url, proc):
            page.goto(f"{url}/rivet-test/stream/?workflow=browser-1000&actor=seen")
            # A worker retries a run that broke on storage trouble; this one
            # did once in three full runs ("database is locked" after the
            # busy timeout, SQLite, while the servers restarted: see the
            # note of stop 48), and the stream must still end whole.
            thread = run_in_background("browser-1000", retry_for=120)
            wait_for(
                lambda: int(page.locator("#count").inner_text()) >= 200,
                what="200 values",
            )
            kill9(proc)
        with daphne_process(env, port=port) as (url, _):
            # actor.events() resumed too: what happened while it was away comes.
            with Client(f"{url}/rivet") as client:
                assert [client.actor("counter", "seen").call("increment")
                        for _ in range(2)] == [1, 2]  # fmt: skip
            expect(page.locator("#status")).to_have_text("closed", timeout=90_000)
            wait_for(
                lambda: page.evaluate("window.rivet.changes.length") == 2,
                what="the counter's events",
            )
            assert page.evaluate("window.rivet.changes") == [[1, 1], [2, 2]]
            values = page.evaluate("window.rivet.values")
            problems = page.evaluate("window.rivet.problems")
        thread.join(120)
    assert values == list(range(1000))
    assert problems == [] and errors == []
