"""The delivery guarantee, in process: tail gaps, missed events, cleanup.

The consumer, the runtime, the event log and the channel layer are real;
the socket is channels' communicator. What would be a lost channel-layer
message in production is made one here by switching ``events.publish``
off for a few commits (nothing announces them; only the log has them).
Real servers (daphne, Redis) for the same guarantees:
tests/deployment/test_load.py and tests/transport/test_e2e_redis.py.
"""

import asyncio
import uuid

import pytest
import redis
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.test import override_settings

from django_rivet import actors, events
from django_rivet.actors.connections import Connect
from django_rivet.actors.lanes import ainvoke
from django_rivet.actors.operations import CallAction
from django_rivet.actors.rows import ActorRef
from django_rivet.exceptions import EventTooLarge
from django_rivet.models import ActorEvent, Connection
from django_rivet.testing import RivetCommunicator
from django_rivet.transport import consumer as consumer_module
from django_rivet.transport import feeds
from django_rivet.transport.heartbeat import heartbeat
from tests.support.servers import wait_until_no_connection_rows

pytestmark = pytest.mark.django_db(transaction=True)

# Every web process reads the actors' latest seqs this often (here: fast).
FAST_CHECK = {"EVENT_CHECK_INTERVAL": 0.05}


async def increment(key, by=1):
    return await ainvoke(
        ActorRef.of("counter", key, mode="get_or_create"), CallAction("increment", [by])
    )


async def unannounced(monkeypatch, count, key, unchecked=False):
    """Commit ``count`` increments whose events nothing announces.

    ``unchecked``: the process's periodic check does not run meanwhile, so
    the whole burst lands before the process can notice any of it (else a
    socket may legitimately follow the burst event by event).
    """
    real, check = events.publish, feeds.Hub.check
    monkeypatch.setattr(events, "publish", lambda actor_id, logged: None)
    if unchecked:

        async def no_check(self, targets=None):
            return None

        monkeypatch.setattr(feeds.Hub, "check", no_check)
    for _ in range(count):
        await increment(key)
    monkeypatch.setattr(events, "publish", real)
    monkeypatch.setattr(feeds.Hub, "check", check)


async def test_the_last_events_of_a_burst_arrive_though_nothing_announced_them(
    monkeypatch,
):
    with override_settings(RIVET=FAST_CHECK):
        comm = RivetCommunicator("counter", ["tail"], subscribe="changed")
        await comm.handshake()
        await increment(["tail"])
        assert (await comm.receive_event())["seq"] == 1
        # The tail of a burst is lost: no later message reveals the gap.
        await unannounced(monkeypatch, 3, ["tail"])
        seqs = [(await comm.receive_event())["seq"] for _ in range(3)]
        assert seqs == [2, 3, 4]
        assert await comm.receive_nothing(0.2)
        await comm.disconnect()


async def test_a_connection_behind_the_log_is_told_what_it_missed(monkeypatch):
    with override_settings(RIVET={**FAST_CHECK, "EVENT_LOG_SIZE": 3}):
        comm = RivetCommunicator("counter", ["behind"], subscribe="changed")
        init = await comm.handshake()
        assert init["seq"] == 0
        # Ten events are committed; the log keeps the last three. When the
        # process notices, the socket is told which seqs will not come, then
        # gets the rest, in order.
        await unannounced(monkeypatch, 10, ["behind"], unchecked=True)
        told, seqs, position = [], [], 0
        while not seqs or seqs[-1] < 10:
            frame = await comm.receive_frame()
            if frame["type"] == "event":
                seqs.append(frame["seq"])
                position = frame["seq"]
                continue
            assert (frame["type"], frame["group"], frame["code"]) == (
                "error",
                "actor",
                "events_missed",
            )
            assert "action_id" not in frame
            # It counts from where this socket stood: the last event it got,
            # or the end of the gap it was last told about.
            assert frame["metadata"]["since"] == position
            position = frame["metadata"]["oldest"] - 1
            told.append(frame["metadata"])
        assert told
        assert seqs == sorted(seqs) and seqs[-3:] == [8, 9, 10]
        missed = {
            seq for meta in told for seq in range(meta["since"] + 1, meta["oldest"])
        }
        assert missed | set(seqs) == set(range(1, 11))
        assert not missed & set(seqs)
        # Live delivery carries on.
        await increment(["behind"])
        assert (await comm.receive_event())["seq"] == 11
        await comm.disconnect()


async def test_a_stream_behind_the_feed_reads_the_log_in_order(monkeypatch):
    # Two sockets on one actor share the process's feed; one of them stops
    # sending for a while (its buffer share is bounded): it catches up from
    # the log, in order, without losing anything.
    monkeypatch.setattr(feeds, "FEED_EVENTS", 2)
    fast = RivetCommunicator("counter", ["shared"], subscribe="changed")
    slow = RivetCommunicator("counter", ["shared"], subscribe="changed")
    await fast.handshake()
    await slow.handshake()
    for _ in range(8):
        await increment(["shared"])
    assert [(await fast.receive_event())["seq"] for _ in range(8)] == list(range(1, 9))
    assert [(await slow.receive_event())["seq"] for _ in range(8)] == list(range(1, 9))
    await fast.disconnect()
    await slow.disconnect()


async def test_a_broadcast_over_max_event_bytes_fails_the_action():
    room = await actors.aget_or_create("chatRoom", "big-event")
    with override_settings(RIVET={"MAX_EVENT_BYTES": 1000}):
        with pytest.raises(EventTooLarge) as raised:
            await room.acall("shout", 2000)
    assert raised.value.qualified_code == "actor/event_too_large"
    assert raised.value.metadata["limit"] == 1000
    # Rolled back: nothing was logged.
    assert not await sync_to_async(
        ActorEvent.objects.filter(actor_id=room.actor_id).exists
    )()
    assert await room.acall("shout", 500) == 500


async def test_conn_send_over_max_event_bytes_fails_the_action():
    comm = RivetCommunicator("chatRoom", ["big-send"], params={"name": "ann"})
    await comm.handshake()
    with override_settings(RIVET={"MAX_EVENT_BYTES": 100}):
        with pytest.raises(EventTooLarge):
            await comm.call("whisper", "ann", "x" * 500)
        assert await comm.call("whisper", "ann", "short") == 1
    await comm.disconnect()


# -- consumers survive the channel layer, and always clean up -------------------
async def test_a_consumer_survives_failing_channel_layer_reads(monkeypatch):
    layer = get_channel_layer()
    real_receive = layer.receive
    failures = {"left": 4}

    async def flaky_receive(channel):
        if channel.startswith("specific.") and failures["left"]:
            failures["left"] -= 1
            await asyncio.sleep(0.01)
            if failures["left"] % 2:
                raise redis.exceptions.TimeoutError("Timeout reading from socket")
            raise redis.exceptions.ConnectionError("Connection closed by server.")
        return await real_receive(channel)

    monkeypatch.setattr(layer, "receive", flaky_receive)
    ann = RivetCommunicator("chatRoom", ["flaky"], params={"name": "ann"})
    bob = RivetCommunicator("chatRoom", ["flaky"], params={"name": "bob"})
    await ann.handshake()
    await bob.handshake()
    await ann.subscribe("whisper")
    # conn.send travels through the channel layer to ann's consumer.
    assert await bob.call("whisper", "ann", "still there?") == 1
    event = await ann.receive_event("whisper")
    assert event["args"] == ["bob", "still there?"]
    assert failures["left"] == 0
    await ann.disconnect()
    await bob.disconnect()


async def test_a_consumer_that_fails_still_removes_its_connection(monkeypatch):
    async def broken(self, message):
        raise RuntimeError("a bug in frame handling")

    comm = RivetCommunicator("chatRoom", ["broken"], params={"name": "ann"})
    await comm.handshake()
    monkeypatch.setattr(consumer_module.RivetConsumer, "websocket_receive", broken)
    await comm.send_frame({"type": "action", "id": 1, "name": "names", "args": []})
    await comm.receive_close()
    await wait_until_no_connection_rows()
    log = await actors.aget_or_create("chatRoom", "broken")
    assert (await log.acall("log"))[-1] == ["disconnect", "ann"]


async def test_the_heartbeat_cleans_up_after_a_consumer_that_ended_without_it():
    result = await ainvoke(
        ActorRef.of("chatRoom", "orphan", mode="get_or_create"),
        Connect(params={"name": "ann"}, channel_name="test.orphan"),
    )

    async def consumer_that_dies():
        # Accepted (tracked), then gone without its cleanup.
        heartbeat.add(result.conn_id, result.actor_id)

    await asyncio.create_task(consumer_that_dies())
    assert result.conn_id in heartbeat
    await heartbeat.beat()
    assert result.conn_id not in heartbeat
    await wait_until_no_connection_rows()
    room = await actors.aget_or_create("chatRoom", "orphan")
    assert (await room.acall("log"))[-1] == ["disconnect", "ann"]


async def test_the_heartbeat_closes_a_socket_whose_row_is_gone():
    comm = RivetCommunicator("chatRoom", ["vanished"], params={"name": "ann"})
    init = await comm.handshake()
    # Swept (or destroyed) while the message telling this socket was lost.
    await sync_to_async(
        Connection.objects.filter(pk=uuid.UUID(init["connection_id"])).delete
    )()
    await heartbeat.beat()
    assert await comm.receive_close() == 1000
    await comm.disconnect()


async def test_a_failing_group_removal_does_not_keep_the_row(monkeypatch):
    # 1,000 sockets closing at once made redis-py's pool refuse the removals
    # (MaxConnectionsError): the error must not skip the row's deletion.
    layer = get_channel_layer()

    async def failing_discard(group, channel):
        raise redis.exceptions.ConnectionError("Too many connections")

    monkeypatch.setattr(layer, "group_discard", failing_discard)
    comm = RivetCommunicator("chatRoom", ["discard"], params={"name": "ann"})
    await comm.handshake()
    await comm.disconnect()
    await wait_until_no_connection_rows()
    room = await actors.aget_or_create("chatRoom", "discard")
    assert (await room.acall("log"))[-1] == ["disconnect", "ann"]
