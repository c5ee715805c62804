"""Server-Sent Events, in process: workflow streams and actor events over HTTP.

Django's async test client drives the views and reads their streaming
responses at its own pace; the runtime, the event log and the feeds are
real. Real servers (daphne, Redis, Chromium): tests/transport/test_e2e_sse.py.
"""

import asyncio
import functools
import json

import pytest
from django.test import AsyncClient, override_settings

from django_rivet import workflows
from django_rivet.testing import RivetCommunicator, arun_until_idle
from django_rivet.transport.sse import BoundedSend
from tests.support.sse import Parser
from tests.transport.test_delivery import FAST_CHECK, increment, unannounced
from tests.transport.test_flow import FakeDaphneProtocol, FakeTransport

# pg: the PostgreSQL leg runs this module (stream rows, the event log).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


class Reader:
    """One streaming response, read message by message."""

    def __init__(self, response):
        self.response = response
        self.body = aiter(response.streaming_content)
        self.parser = Parser()

    async def next(self, timeout=5.0):
        while not self.parser.messages:
            chunk = await asyncio.wait_for(anext(self.body), timeout)
            self.parser.feed(chunk)
        return self.parser.messages.pop(0)

    async def until_close(self):
        found = []
        while (message := await self.next()).event != "close":
            found.append(message)
        return found

    async def close(self):
        await self.body.aclose()


async def open_stream(path, **headers):
    response = await AsyncClient().get(path, headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/event-stream"
    return Reader(response)


async def finished_streamer(workflow_id, count):
    handle = await workflows.astart("streamer", {"count": count}, id=workflow_id)
    assert await arun_until_idle(handle) == "completed"
    return handle


# -- workflow streams ------------------------------------------------------------------
async def test_a_stream_is_sent_with_its_offsets_then_closed():
    await finished_streamer("sse-1", 5)
    reader = await open_stream("/rivet/workflows/sse-1/streams/n")
    messages = await reader.until_close()
    assert [(m.id, m.data) for m in messages] == [(i + 1, i) for i in range(5)]
    assert reader.parser.retry == 1000
    await reader.close()


@pytest.mark.parametrize(
    ("query", "headers", "first"),
    [
        ("?since=3", {}, 3),
        ("", {"Last-Event-ID": "2"}, 2),
        ("?since=1", {"Last-Event-ID": "4"}, 4),  # the reconnection's header wins
    ],
)
async def test_since_and_last_event_id_resume_without_gap_or_repeat(
    query, headers, first
):
    await finished_streamer("sse-2", 6)
    reader = await open_stream(f"/rivet/workflows/sse-2/streams/n{query}", **headers)
    messages = await reader.until_close()
    assert [m.id for m in messages] == list(range(first + 1, 7))
    await reader.close()


async def test_refusals_and_missing_workflows_get_one_same_403():
    await finished_streamer("sse-3", 1)
    greet = await workflows.astart("greet", {"name": "ann"}, id="no-hook")
    await arun_until_idle(greet)
    client = AsyncClient()
    answers = [
        await client.get("/rivet/workflows/sse-3/streams/secret"),  # hook: False
        await client.get("/rivet/workflows/sse-3/streams/n", headers={"X-Refuse": "1"}),
        await client.get("/rivet/workflows/nobody/streams/n"),  # no such workflow
        await client.get("/rivet/workflows/no-hook/streams/n"),  # no can_read_stream
    ]
    assert {a.status_code for a in answers} == {403}
    bodies = {a.content for a in answers}
    assert len(bodies) == 1
    assert json.loads(bodies.pop())["code"] == "forbidden"
    assert json.loads(answers[0].content)["group"] == "workflow"


async def test_a_bad_offset_is_a_bad_request():
    await finished_streamer("sse-4", 1)
    answer = await AsyncClient().get("/rivet/workflows/sse-4/streams/n?since=-1")
    assert answer.status_code == 400
    assert json.loads(answer.content)["code"] == "malformed"


async def test_an_idle_stream_sends_keepalive_comments():
    handle = await workflows.astart("streamer", {"count": 1, "hold": True}, id="idle")
    assert await arun_until_idle(handle) == "sleeping"  # wrote, then waits
    with override_settings(RIVET={"SSE_KEEPALIVE_INTERVAL": 0.05}):
        reader = await open_stream("/rivet/workflows/idle/streams/n")
        assert (await reader.next()).id == 1
        reader.parser.feed(await asyncio.wait_for(anext(reader.body), 5))
        assert reader.parser.comments == ["keep-alive"]
        await handle.asend("release")
        assert await arun_until_idle(handle) == "completed"
        assert await reader.until_close() == []
        await reader.close()


# -- actor events ----------------------------------------------------------------------
def delivered(rows, first, last):
    """Check one connection's events against the guarantee; return the notices.

    ``rows`` are ``(seq, notice metadata)``: in seq order, and every seq from
    ``first`` to ``last`` either delivered or named missed, never both.
    """
    seqs = [seq for seq, meta in rows if meta is None]
    told = [meta for _, meta in rows if meta is not None]
    missed = {s for m in told for s in range(m["since"] + 1, m["oldest"])}
    assert seqs == sorted(seqs) and seqs[-3:] == [last - 2, last - 1, last]
    assert missed | set(seqs) == set(range(first, last + 1))
    assert not missed & set(seqs)
    return told


async def test_actor_events_match_the_websocket_s_including_missed_ones(monkeypatch):
    with override_settings(RIVET={**FAST_CHECK, "EVENT_LOG_SIZE": 3}):
        comm = RivetCommunicator("counter", ["both"], subscribe="changed")
        await comm.handshake()
        reader = await open_stream("/rivet/actors/counter/events?key=both&subscribe=*")
        init = await reader.next()
        assert (init.event, init.id, init.data["seq"]) == ("init", 0, 0)
        for _ in range(3):
            await increment(["both"])
        live_ws = [await comm.receive_frame() for _ in range(3)]
        live_sse = [await reader.next() for _ in range(3)]
        assert (
            [(f["name"], f["seq"], f["args"]) for f in live_ws]
            == [(m.event, m.id, m.data) for m in live_sse]
            == [("changed", seq, [seq]) for seq in (1, 2, 3)]
        )
        # Ten events nothing announces, the log keeps three: both are told.
        await unannounced(monkeypatch, 10, ["both"], unchecked=True)
        ws_rows, sse_rows = [], []
        while not ws_rows or ws_rows[-1][0] != 13:
            frame = await comm.receive_frame()
            notice = frame["metadata"] if frame["type"] == "error" else None
            if notice is not None:
                assert frame["code"] == "events_missed"
            ws_rows.append((frame.get("seq"), notice))
        while not sse_rows or sse_rows[-1][0] != 13:
            message = await reader.next()
            notice = None
            if message.event == "error":
                assert set(message.data) == {
                    "type", "group", "code", "message", "metadata"
                }  # fmt: skip
                assert (message.data["group"], message.data["code"]) == (
                    "actor",
                    "events_missed",
                )
                notice = message.data["metadata"]
            sse_rows.append((message.id, notice))
        assert delivered(ws_rows, 4, 13) and delivered(sse_rows, 4, 13)
        await reader.close()
        await comm.disconnect()


async def test_on_auth_sees_sse_and_can_subscribe_refuses_by_name():
    client = AsyncClient()
    closed = await client.get(
        "/rivet/actors/newsroom/events?key=n&create=true",
        headers={"X-Newsroom": "closed"},
    )
    assert closed.status_code == 403
    reader = await open_stream(
        "/rivet/actors/newsroom/events?key=n&create=true&subscribe=news,secret",
        **{"X-Newsroom": "sse"},
    )
    assert (await reader.next()).event == "init"
    refusal = await reader.next()
    assert refusal.event == "error"
    assert (refusal.data["type"], refusal.data["code"]) == ("error", "forbidden")
    assert refusal.data["metadata"] == {"event": "secret"}
    await reader.close()


async def test_a_follower_does_not_create_the_actor_unless_asked():
    answer = await AsyncClient().get("/rivet/actors/counter/events?key=nobody")
    assert answer.status_code == 404
    assert json.loads(answer.content)["code"] == "not_found"


async def test_an_old_last_event_id_is_told_the_log_was_truncated():
    with override_settings(RIVET={"EVENT_LOG_SIZE": 2}):
        for _ in range(5):
            await increment(["old"])
        reader = await open_stream(
            "/rivet/actors/counter/events?key=old&subscribe=changed",
            **{"Last-Event-ID": "1"},
        )
        init = await reader.next()
        assert (init.event, init.id, init.data["seq"]) == ("init", 1, 5)
        notice = await reader.next()
        assert notice.data["code"] == "event_log_truncated"
        assert notice.data["metadata"] == {"since": 1, "oldest": 4, "latest": 5}
        assert [(await reader.next()).id for _ in range(2)] == [4, 5]
        await reader.close()


# -- daphne's sockets --------------------------------------------------------------
class BufferingTransport(FakeTransport):
    """twisted's TCP transport as far as writing goes: buffered until doWrite."""

    connected = True
    disconnecting = False

    def __init__(self):
        self.buffered, self.written = [], []

    def doWrite(self):  # noqa: N802 - twisted's interface
        self.written += self.buffered
        self.buffered = []

    def setTcpNoDelay(self, enabled):  # noqa: N802
        self.no_delay = enabled


class BufferingServer:
    """daphne's server: a body message lands in the socket's buffer."""

    async def handle_reply(self, protocol, message):
        protocol.transport.buffered.append(message["body"])


BufferingServer.__module__ = "daphne.server"


async def test_each_event_stream_message_leaves_daphne_as_it_is_sent():
    # twisted writes a socket's buffer on the reactor's next turn: with a
    # hundred responses served in one turn, each reader's message waited for
    # the last one's. A closing socket is left to twisted, which closes it
    # in that write.
    protocol = FakeDaphneProtocol()
    protocol.transport = BufferingTransport()
    send = BoundedSend(functools.partial(BufferingServer().handle_reply, protocol))
    body = {"type": "http.response.body", "more_body": True}
    await send({**body, "body": b"data: 1\n\n"})
    assert protocol.transport.written == [b"data: 1\n\n"]
    assert protocol.transport.no_delay is True
    protocol.transport.disconnecting = True
    await send({**body, "body": b"data: 2\n\n"})
    assert protocol.transport.buffered == [b"data: 2\n\n"]
    send.close()
