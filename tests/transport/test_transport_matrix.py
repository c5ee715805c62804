"""The WebSocket transport's behaviour matrix: behaviour x flavour x server.

Every behaviour a client relies on -- authorization per action,
``can_subscribe`` (``*`` included), limits, close codes, a socket that does
not read, a socket that floods, what a lagging socket holds, errors -- runs
against both protocol flavours (django-rivet's own, and the RivetKit
client's in its encodings), through real servers (daphne, and uvicorn with
its default ``websockets-sansio`` implementation) serving ``tests.support.asgi``,
the quickstart's application with ``AuthMiddlewareStack``. One server
process per kind for the module; memory is the server process's RSS.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
from urllib.parse import quote

import cbor2
import httpx
import pytest
from asgiref.sync import sync_to_async
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from django_rivet.models import Connection
from django_rivet.transport.rivetkit import bare
from tests.support.servers import (
    rss_kib,
    wait_until_no_connection_rows,
)

pytestmark = [pytest.mark.servers, pytest.mark.django_db(transaction=True)]

# The servers' settings: a slow reader is given up on after 3 s.
SLOW = 3
RIVET = {"SLOW_CONSUMER_TIMEOUT": SLOW}
MIB = 1024
FLAVOURS = ["rivet", "rivetkit-json"]
ENCODINGS = ["rivet", "rivetkit-json", "rivetkit-cbor", "rivetkit-bare"]


class Server:
    """A server process of the module."""

    def __init__(self, kind, url, proc):
        self.kind, self.url, self.proc = kind, url, proc

    def rss(self):
        return rss_kib(self.proc.pid)

    async def call(self, name, key, action, *args):
        async with httpx.AsyncClient(timeout=60) as client:
            response = await client.post(
                f"{self.url}/rivet/actors/{name}/actions/{action}",
                params={"key": key},
                json={"args": list(args)},
            )
        assert response.status_code == 200, response.text
        return response.json()["output"]


@pytest.fixture(scope="module", params=["daphne", "uvicorn"])
def server_kind(request):
    return request.param


@pytest.fixture(scope="module")
def server_env_extra():
    return {
        "DJANGO_SETTINGS_MODULE": "tests.settings.load",
        "RIVET_LOAD_RIVET": json.dumps(RIVET),
    }


@pytest.fixture(scope="module")
def server(server_kind, server_process):
    return Server(server_kind, *server_process)


@pytest.fixture(autouse=True)
async def _rows_gone_before_flush():
    yield
    # The servers run on_disconnect after sockets close: let them finish
    # before the test database is flushed.
    await wait_until_no_connection_rows(20)


# -- one client for every flavour -----------------------------------------------------
class Wire:
    """Frames of one flavour and encoding, as a client writes and reads them."""

    def __init__(self, flavour):
        self.kind, _, self.encoding = flavour.partition("-")

    def url(self, server, actor, key, query=""):
        ws = server.url.replace("http://", "ws://")
        if self.kind == "rivet":
            return f"{ws}/rivet/actors/{actor}/connect?key={key}{query}"
        return (
            f"{ws}/rivet/gateway/{actor}/connect?rvt-namespace=default"
            f"&rvt-method=getOrCreate&rvt-runner=default&rvt-key={key}"
        )

    def subprotocols(self, params=None):
        if self.kind == "rivet":
            extra = []
            if params is not None:
                text = base64.urlsafe_b64encode(json.dumps(params).encode()).decode()
                extra = ["rivet_conn_params." + text.rstrip("=")]
            return ["rivet", *extra]
        extra = [] if params is None else [
            "rivet_conn_params." + quote(json.dumps(params), safe="")
        ]  # fmt: skip
        return ["rivet", f"rivet_encoding.{self.encoding}", *extra]

    def action(self, action_id, name, args=()):
        if self.kind == "rivet":
            return json.dumps(
                {"type": "action", "id": action_id, "name": name, "args": list(args)}
            )
        if self.encoding == "bare":
            return bare.write_to_server(
                bare.ActionRequest(action_id, name, cbor2.dumps(list(args)))
            )
        if self.encoding == "cbor":
            val = {"id": action_id, "name": name, "args": list(args)}
            return cbor2.dumps({"body": {"tag": "ActionRequest", "val": val}})
        val = {"id": ["$BigInt", str(action_id)], "name": name, "args": list(args)}
        return json.dumps({"body": {"tag": "ActionRequest", "val": val}})

    def subscribe(self, event):
        if self.kind == "rivet":
            return json.dumps({"type": "subscribe", "event": event})
        if self.encoding == "bare":
            return bare.write_to_server(bare.SubscriptionRequest(event, True))
        frame = {
            "body": {
                "tag": "SubscriptionRequest",
                "val": {"eventName": event, "subscribe": True},
            }
        }
        if self.encoding == "cbor":
            return cbor2.dumps(frame)
        return json.dumps(frame)

    def read(self, data):
        """``(kind, ...)``: init; response id output; event name args; error code id."""
        if self.kind == "rivet":
            frame = json.loads(data)
            kind = frame["type"]
            if kind == "action_response":
                return ("response", frame["id"], frame["output"])
            if kind == "event":
                return ("event", frame["name"], frame["args"])
            if kind == "error":
                code = f"{frame['group']}/{frame['code']}"
                return ("error", code, frame.get("action_id"))
            return (kind,)
        if self.encoding == "bare":
            return _read_bare(data)
        frame = cbor2.loads(data) if self.encoding == "cbor" else json.loads(data)
        tag, val = frame["body"]["tag"], frame["body"]["val"]
        if tag == "ActionResponse":
            return ("response", _bigint(val["id"]), val["output"])
        if tag == "Event":
            return ("event", val["name"], val["args"])
        if tag == "Error":
            action_id = val["actionId"]
            code = f"{val['group']}/{val['code']}"
            return ("error", code, None if action_id is None else _bigint(action_id))
        return ("init",)


def _bigint(value):
    return int(value[1]) if isinstance(value, list) else int(value)


def _read_bare(data):
    reader = bare._open(data)
    tag = reader.u8()
    if tag == 1:
        group, code = reader.string(), reader.string()
        reader.string()
        if reader.bool():
            reader.data_()
        action_id = reader.uint() if reader.bool() else None
        return ("error", f"{group}/{code}", action_id)
    if tag == 2:
        return ("response", reader.uint(), cbor2.loads(reader.data_()))
    if tag == 3:
        return ("event", reader.string(), cbor2.loads(reader.data_()))
    return ("init",)


class Socket:
    """One client socket of a flavour."""

    def __init__(self, wire, ws):
        self.wire, self.ws = wire, ws

    async def send(self, frame):
        await self.ws.send(frame)

    async def read(self, timeout=15):
        return self.wire.read(await asyncio.wait_for(self.ws.recv(), timeout))

    async def until(self, predicate, timeout=15):
        """Read frames until ``predicate(frames)``; return them all."""
        frames = []
        deadline = time.monotonic() + timeout
        while not predicate(frames):
            frames.append(await self.read(max(0.1, deadline - time.monotonic())))
        return frames

    async def closed(self, timeout=15):
        """Read until the server closes; return the frames and the close code."""
        frames = []
        try:
            async with asyncio.timeout(timeout):
                while True:
                    frames.append(self.wire.read(await self.ws.recv()))
        except ConnectionClosed:
            pass
        return frames, self.ws.close_code


async def open_socket(
    server, flavour, actor, key, *, params=None, query="", headers=None
):
    wire = Wire(flavour)
    ws = await connect(
        wire.url(server, actor, key, query),
        subprotocols=wire.subprotocols(params),
        additional_headers=headers or {},
        max_size=None,
        # A client that reads what it is sent (the deaf ones are below).
        max_queue=None,
        compression=None,
    )
    return Socket(wire, ws)


async def admitted(server, flavour, actor, key, **options):
    sock = await open_socket(server, flavour, actor, key, **options)
    assert (await sock.read())[0] == "init"
    return sock


def responses(count):
    return lambda frames: sum(f[0] == "response" for f in frames) >= count


# -- authorization ------------------------------------------------------------------
@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_each_action_is_authorized_on_its_own(server, flavour):
    sock = await admitted(
        server, flavour, "gate", f"auth-{flavour}", headers={"X-Gate": "allow"}
    )
    await sock.send(sock.wire.action(1, "bump"))
    await sock.send(sock.wire.action(2, "wipe"))  # needs X-Gate: admin
    await sock.send(sock.wire.action(3, "bump"))
    frames = await sock.until(lambda f: len(f) >= 3)
    assert frames == [
        ("response", 1, 1),
        ("error", "actor/forbidden", 2),
        ("response", 3, 2),
    ]
    await sock.ws.close()


# -- can_subscribe ------------------------------------------------------------------
@pytest.mark.parametrize("flavour", ENCODINGS)
async def test_can_subscribe_refuses_by_name(server, flavour):
    sock = await admitted(server, flavour, "newsroom", f"name-{flavour}")
    await sock.send(sock.wire.subscribe("secret"))
    await sock.send(sock.wire.subscribe("public"))
    await sock.send(sock.wire.action(1, "publish", [["secret", "public"]]))
    await sock.send(sock.wire.action(2, "publish", [["secret", "public"]]))
    frames = await sock.until(
        lambda f: responses(2)(f) and sum(x[0] == "event" for x in f) >= 2
    )
    assert ("error", "actor/forbidden", None) in frames
    events = [f for f in frames if f[0] == "event"]
    assert events == [("event", "public", ["public"])] * 2
    await sock.ws.close()


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_a_wildcard_is_refused_where_can_subscribe_decides(server, flavour):
    sock = await admitted(server, flavour, "newsroom", f"star-{flavour}")
    await sock.send(sock.wire.subscribe("*"))
    await sock.send(sock.wire.subscribe("public"))
    await sock.send(sock.wire.action(1, "publish", [["secret", "public", "other"]]))
    frames = await sock.until(
        lambda f: responses(1)(f) and any(x[0] == "event" for x in f)
    )
    assert frames[0] == ("error", "actor/forbidden", None)
    # Only the name subscribed by name arrives: '*' delivers nothing.
    await sock.send(sock.wire.action(2, "publish", [["public"]]))
    frames += await sock.until(
        lambda f: responses(1)(f) and any(x[0] == "event" for x in f)
    )
    assert [f for f in frames if f[0] == "event"] == [
        ("event", "public", ["public"])
    ] * 2
    await sock.ws.close()


async def test_a_wildcard_in_the_handshake_is_refused_too(server):
    sock = await admitted(
        server, "rivet", "newsroom", "star-query", query="&subscribe=*"
    )
    assert await sock.read() == ("error", "actor/forbidden", None)
    await sock.send(sock.wire.action(1, "publish", [["secret", "public"]]))
    await sock.send(sock.wire.subscribe("public"))
    await sock.send(sock.wire.action(2, "publish", [["public"]]))
    frames = await sock.until(
        lambda f: responses(2)(f) and any(x[0] == "event" for x in f)
    )
    assert [f for f in frames if f[0] == "event"] == [("event", "public", ["public"])]
    await sock.ws.close()


# -- close codes and limits -----------------------------------------------------------
@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize(
    ("word", "code", "close"),
    [("closed", "actor/forbidden", 4403), ("busy", "actor/busy", 4503)],
)
async def test_the_same_refusal_closes_with_the_same_code(
    server, flavour, word, code, close
):
    sock = await open_socket(
        server, flavour, "newsroom", "refusal", headers={"X-Newsroom": word}
    )
    frames, close_code = await sock.closed()
    assert frames == [("error", code, None)]
    assert close_code == close


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_an_oversized_frame_is_answered_then_closed_with_4413(server, flavour):
    sock = await admitted(server, flavour, "counter", f"big-{flavour}")
    await sock.send(sock.wire.action(1, "ping", ["x" * 70_000]))
    frames, close_code = await sock.closed()
    assert frames == [("error", "request/too_large", None)]
    assert close_code == 4413


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_errors_answer_their_action_and_keep_the_connection(server, flavour):
    sock = await admitted(server, flavour, "counter", f"errors-{flavour}")
    await sock.send(sock.wire.action(1, "no_such_action"))
    await sock.send('{"type": 5}' if flavour == "rivet" else '{"body": 5}')
    await sock.send(sock.wire.action(2, "increment", [2]))
    frames = await sock.until(lambda f: len(f) >= 3)
    assert frames == [
        ("error", "actor/action_not_found", 1),
        ("error", "request/malformed", None),
        ("response", 2, 2),
    ]
    await sock.ws.close()


# -- flow control ------------------------------------------------------------------
async def connection_rows(name, key):
    return await sync_to_async(
        Connection.objects.filter(actor__name=name, actor__key_parts=[key]).count
    )()


class Peak:
    """The server's highest RSS while the block runs, sampled every 50 ms."""

    def __init__(self, server):
        self.server, self.peak = server, server.rss()

    async def __aenter__(self):
        self.task = asyncio.create_task(self._sample())
        return self

    async def _sample(self):
        while True:
            self.peak = max(self.peak, self.server.rss())
            await asyncio.sleep(0.05)

    async def __aexit__(self, *exc):
        self.task.cancel()
        self.peak = max(self.peak, self.server.rss())


async def deaf_socket(server, flavour, actor, key, query=""):
    """A socket that stops reading at once (small receive buffer, no reads)."""
    wire = Wire(flavour)
    raw = socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ws = await connect(
        wire.url(server, actor, key, query),
        sock=raw,
        subprotocols=wire.subprotocols(),
        max_queue=1,
        max_size=None,
        compression=None,
    )
    return Socket(wire, ws)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_sockets_that_do_not_read_are_closed_and_cost_little(server, flavour):
    key = f"deaf-{flavour}"
    await server.call("tally", key, "count")
    if flavour != "rivet":
        # The RivetKit client subscribes by frame after Init.
        query = ""
    else:
        query = "&subscribe=blast"
    # The server's own cost of the bursts (without the sockets) comes first.
    for _ in range(4):
        await server.call("tally", key, "blast", 100, 20_000, True)
    before = server.rss()
    socks = [await deaf_socket(server, flavour, "tally", key, query) for _ in range(3)]
    if flavour != "rivet":
        for sock in socks:
            await sock.send(sock.wire.subscribe("blast"))
    async with Peak(server) as peak:
        # 24 MB of random (incompressible) events for each socket.
        for _ in range(12):
            await server.call("tally", key, "blast", 100, 20_000, True)
        end = time.monotonic()
        while await connection_rows("tally", key) and time.monotonic() - end < SLOW + 5:
            await asyncio.sleep(0.1)
        closed_after = time.monotonic() - end
    growth = (peak.peak - before) / MIB
    print(f"\n{server.kind} {flavour}: +{growth:.1f} MiB, closed {closed_after:.1f} s")
    assert await connection_rows("tally", key) == 0, "not closed in time"
    assert growth < 30, growth
    for sock in socks:
        if server.kind == "daphne":
            # daphne drops a socket that does not take its close frame: the
            # client sees 4408, or 1006 when the frame could not be sent.
            _, close_code = await sock.closed(30)
            assert close_code in (4408, 1006), close_code
        else:
            # uvicorn keeps the close frame behind the unread data until the
            # client reads or goes (the connection's row is gone already).
            sock.ws.transport.abort()


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_a_flood_of_frames_is_refused_with_a_code_and_costs_little(
    server, flavour
):
    key = f"flood-{flavour}"
    await server.call("counter", key, "ping")
    sock = await admitted(server, flavour, "counter", key)
    before = server.rss()
    frame = sock.wire.action(1, "ping", ["x" * 60_000])
    sent = 0
    async with Peak(server) as peak:
        with pytest.raises(ConnectionClosed):
            while sent < 150 * 1024 * 1024:
                await sock.ws.send(frame)
                sent += len(frame)
            # All sent and still open: the server must close it now.
            await asyncio.wait_for(sock.ws.wait_closed(), 30)
            await sock.ws.send(frame)
    growth = (peak.peak - before) / MIB
    print(f"\n{server.kind} {flavour}: flood of {sent >> 20} MiB, +{growth:.1f} MiB")
    assert sock.ws.close_code == 4429
    assert growth < 20, growth


async def bursts_peak(server, key, calls):
    """The server's RSS growth (KiB) over ``calls`` bursts of 20 x 100 kB events."""
    before = server.rss()
    async with Peak(server) as peak:
        for _ in range(calls):
            await server.call("tally", key, "blast", 20, 100_000, True)
        await asyncio.sleep(1)
    return peak.peak - before


async def test_lagging_sockets_hold_little_of_the_log(server):
    key = "lag"
    # A socket that reads everything, so the process's feed of the actor and
    # its channel-layer traffic exist in every round.
    watcher = await admitted(server, "rivet", "tally", key, query="&subscribe=blast")
    drain = asyncio.create_task(watcher.closed(120))
    await bursts_peak(server, key, 6)  # the server's own memory levels off
    alone = await bursts_peak(server, key, 12)
    socks = [
        await deaf_socket(server, "rivet", "tally", key, "&subscribe=blast")
        for _ in range(16)
    ]
    # 24 MB of 100 kB events: each lagging socket falls behind the process's
    # shared buffer and reads the rest from the log, a bounded read at a time.
    lagging = await bursts_peak(server, key, 12)
    per_socket = (lagging - alone) / len(socks) / MIB
    print(
        f"\n{server.kind}: +{alone / MIB:.1f} MiB alone, +{lagging / MIB:.1f} MiB "
        f"with {len(socks)} lagging sockets: {per_socket:.2f} MiB each"
    )
    for sock in socks:
        sock.ws.transport.abort()
    await watcher.ws.close()
    await drain
    assert per_socket < 2, per_socket
