"""Flow control's bounds, without a server: the inbound queue and finding daphne.

The same bounds run through real daphne and uvicorn processes in
test_transport_matrix.py; these pin the two rules they rest on.
"""

import functools
import logging

from channels.sessions import InstanceSessionWrapper

from django_rivet.transport import flow
from django_rivet.transport.flow import DaphneFlow, Inbound, find_daphne_protocol


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
