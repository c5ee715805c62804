"""Flow control's bounds, without a server: the inbound queue, daphne's adapters.

The same bounds run through real daphne and uvicorn processes in
test_transport_matrix.py; these pin the two rules they rest on.
"""

import asyncio
import functools
import logging

from channels.sessions import InstanceSessionWrapper

from django_rivet.transport import flow
from django_rivet.transport.flow import (
    DaphneFlow,
    DaphneReads,
    Inbound,
    Outbound,
    find_daphne_protocol,
)


class FakeTransport:
    producer = None
    streamingProducer = False  # noqa: N815 - twisted's attribute


class FakeDaphneProtocol:
    """Stands in for daphne's WebSocketProtocol (the twisted side only)."""

    def __init__(self):
        self.transport = FakeTransport()

    def registerProducer(self, producer, streaming):  # noqa: N802
        self.transport.producer = producer
        self.transport.streamingProducer = streaming

    def unregisterProducer(self):  # noqa: N802
        self.transport.producer = None


FakeDaphneProtocol.__module__ = "daphne.ws_protocol"


class FakeServer:
    async def handle_reply(self, protocol, message):
        pass


FakeServer.__module__ = "daphne.server"


def daphne_send():
    protocol = FakeDaphneProtocol()
    return protocol, functools.partial(FakeServer().handle_reply, protocol)


def test_daphne_is_found_behind_channels_session_middleware(settings):
    protocol, send = daphne_send()
    wrapper = InstanceSessionWrapper({"type": "websocket", "cookies": {}}, send)

    async def closure_middleware(message):  # another middleware's wrapper
        await wrapper.send(message)

    assert find_daphne_protocol(closure_middleware) == (protocol, True)
    adapter = DaphneFlow.attach(closure_middleware)
    assert adapter is not None and protocol.transport.producer is adapter
    adapter.pauseProducing()
    assert adapter.paused
    adapter.resumeProducing()
    adapter.close()
    assert protocol.transport.producer is None


def test_a_daphne_send_without_its_socket_is_run_without_the_adapter_and_logged(
    caplog,
):
    flow._warned.discard("daphne")
    send = functools.partial(FakeServer().handle_reply, object())
    with caplog.at_level(logging.WARNING, logger="django_rivet.transport"):
        assert DaphneFlow.attach(send) is None
    assert "daphne's socket was not found" in caplog.text


def test_other_servers_need_no_adapter(caplog):
    async def uvicorn_like_send(message):
        pass

    with caplog.at_level(logging.WARNING, logger="django_rivet.transport"):
        assert DaphneFlow.attach(uvicorn_like_send) is None
    assert caplog.text == ""


def test_the_inbound_queue_refuses_past_either_bound():
    by_count = Inbound(max_frames=2, max_bytes=1000)
    assert by_count.put("a", 1) and by_count.put("b", 1)
    assert not by_count.put("c", 1)
    by_bytes = Inbound(max_frames=100, max_bytes=10)
    assert by_bytes.put(b"12345", 5) and by_bytes.put(b"12345", 5)
    assert not by_bytes.put(b"1", 1)
    assert len(by_bytes) == 2 and by_bytes.bytes == 10


def test_a_frame_is_refused_with_the_close_code_of_its_bound():
    inbound = Inbound(max_frames=2, max_bytes=1000)
    assert inbound.take({"type": "websocket.receive", "text": "é" * 10}, 100) is None
    assert inbound.bytes == 20  # UTF-8 bytes, not characters
    too_large, code = inbound.take({"bytes": b"x" * 101}, 100)
    assert (too_large.qualified_code, code) == ("request/too_large", 4413)
    assert too_large.metadata == {"size": 101, "limit": 100}
    assert inbound.take({"bytes": b"x"}, 100) is None
    too_many, code = inbound.take({"bytes": b"x"}, 100)
    assert (too_many.qualified_code, code) == ("request/too_many_frames", 4429)
    assert len(inbound) == 2


class ReadingTransport(FakeTransport):
    """A twisted transport's read side: paused or reading."""

    reading = True

    def pauseProducing(self):  # noqa: N802 - twisted's interface
        self.reading = False

    def resumeProducing(self):  # noqa: N802
        self.reading = True


async def test_a_daphne_socket_is_read_only_while_the_consumer_waits_for_a_frame():
    protocol, send = daphne_send()
    protocol.transport = ReadingTransport()
    protocol.application_queue = queue = asyncio.Queue()
    reads = DaphneReads.attach(queue.get, DaphneFlow.attach(send))
    assert reads is not None
    for n in range(3):  # what one read of the socket brought
        queue.put_nowait({"type": "websocket.receive", "text": str(n)})
    assert (await reads.receive())["text"] == "0"
    # The consumer is busy with that frame: nothing more is read meanwhile.
    assert not protocol.transport.reading
    assert (await reads.receive())["text"] == "1"
    assert (await reads.receive())["text"] == "2"
    assert not protocol.transport.reading  # drained only by the consumer
    waiting = asyncio.ensure_future(reads.receive())
    await asyncio.sleep(0)
    assert protocol.transport.reading  # nothing queued, the consumer waits
    queue.put_nowait({"type": "websocket.disconnect"})
    assert (await waiting)["type"] == "websocket.disconnect"
    assert not protocol.transport.reading
    reads.close()
    assert protocol.transport.reading


def test_a_daphne_without_a_pausable_transport_runs_unpaused_and_is_logged(caplog):
    flow._warned.discard("daphne-reads")
    protocol, send = daphne_send()  # a FakeTransport: no pauseProducing
    protocol.application_queue = asyncio.Queue()
    with caplog.at_level(logging.WARNING, logger="django_rivet.transport"):
        assert (
            DaphneReads.attach(protocol.application_queue.get, DaphneFlow.attach(send))
            is None
        )
    assert "without inbound flow control" in caplog.text
    assert DaphneReads.attach(protocol.application_queue.get, None) is None


async def test_a_send_waiting_for_room_ends_unsent_when_the_socket_closes():
    protocol, send = daphne_send()
    sent = []

    async def recording_send(message):
        sent.append(message)

    outbound = Outbound(send)
    outbound._send = recording_send
    outbound.daphne.pauseProducing()  # the client does not read
    waiting = asyncio.ensure_future(outbound.send({"type": "websocket.send"}, 30))
    await asyncio.sleep(0)
    assert not waiting.done()
    assert await outbound.send({"type": "websocket.close"}, None, room=False)
    outbound.close()
    assert await waiting is True  # nothing to wait for any more
    assert sent == [{"type": "websocket.close"}]
