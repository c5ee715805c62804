"""Connection lifecycle helpers: heartbeat, the liveness sweep, Disconnect."""

import datetime
import uuid

import pytest
from asgiref.sync import sync_to_async

from django_rivet import Actor, action, actors, clock
from django_rivet.actors.connections import SERVER_ID, Connect, Disconnect
from django_rivet.actors.liveness import (
    stale_after,
    sweep_stale_connections,
    touch_connections,
)
from django_rivet.actors.rows import ActorRef
from django_rivet.actors.spine import invoke
from django_rivet.models import Connection
from django_rivet.testing import RivetCommunicator, freeze_time, register_temporarily
from django_rivet.transport.heartbeat import heartbeat
from django_rivet.upkeep import sweeper
from tests.support.polling import await_for

# pg: the PostgreSQL leg runs this module (the liveness sweep (SKIP LOCKED)).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


def connect(name="chatRoom", key="room", params=None, server_id=SERVER_ID):
    """Admit a connection as a consumer would (without a socket)."""
    result = invoke(
        ActorRef.of(name, key, mode="get_or_create"),
        Connect(params=params, channel_name="test.channel", server_id=server_id),
    )
    return result.conn_id


def test_connect_and_disconnect_run_the_hooks_in_order():
    conn_id = connect(params={"name": "ann"})
    row = Connection.objects.get(pk=conn_id)
    assert row.server_id == SERVER_ID
    room = actors.get("chatRoom", "room")
    assert invoke(ActorRef(actor_id=room.actor_id), Disconnect(conn_id)) is True
    assert room.call("log") == [["connect", "ann"], ["disconnect", "ann"]]
    assert not Connection.objects.exists()
    # A second disconnect finds nothing and runs nothing.
    assert invoke(ActorRef(actor_id=room.actor_id), Disconnect(conn_id)) is False
    assert len(room.call("log")) == 2


def test_touch_refreshes_only_the_given_connections_and_reports_missing_rows():
    with freeze_time() as frozen:
        mine = connect(params={"name": "ann"})
        theirs = connect(params={"name": "bob"})  # same process, other consumer
        gone = uuid.uuid4()
        frozen.advance(100)
        assert touch_connections([mine, gone]) == {gone}
    seen = dict(Connection.objects.values_list("pk", "last_seen_at"))
    assert seen[mine] - seen[theirs] == datetime.timedelta(seconds=100)


def test_sweep_removes_stale_rows_and_runs_on_disconnect():
    with freeze_time() as frozen:
        connect(params={"name": "ann"}, server_id="crashed")
        frozen.advance(stale_after() / 2)
        fresh = connect(params={"name": "bob"}, server_id="alive")
        assert sweep_stale_connections() == 0
        frozen.advance(stale_after() / 2 + 1)
        assert sweep_stale_connections() == 1
    assert list(Connection.objects.values_list("pk", flat=True)) == [fresh]
    log = actors.get("chatRoom", "room").call("log")
    assert log[-1] == ["disconnect", "ann"]
    assert actors.get("chatRoom", "room").call("names") == ["bob"]


class FailingGoodbye(Actor):
    name = "failingGoodbye"

    def on_disconnect(self, ctx, conn):
        ctx.state = "changed"
        raise RuntimeError("boom")

    @action
    def state(self, ctx):
        return ctx.state


def test_sweep_removes_the_row_even_if_on_disconnect_fails():
    with register_temporarily(FailingGoodbye), freeze_time() as frozen:
        connect("failingGoodbye", "x")
        frozen.advance(stale_after() + 1)
        assert sweep_stale_connections() == 1
        assert actors.get("failingGoodbye", "x").call("state") is None
    assert not Connection.objects.exists()


def test_sweep_removes_rows_of_unregistered_actor_classes():
    with register_temporarily(FailingGoodbye):
        connect("failingGoodbye", "gone")
    with freeze_time(clock.now() + stale_after() + 1):
        assert sweep_stale_connections() == 1
    assert not Connection.objects.exists()


def test_sweep_spares_rows_refreshed_meanwhile():
    with freeze_time() as frozen:
        conn_id = connect(params={"name": "ann"})
        frozen.advance(stale_after() + 1)
        touch_connections([conn_id])
        assert sweep_stale_connections() == 0
    assert Connection.objects.filter(pk=conn_id).exists()


async def test_swept_connection_is_closed_and_later_actions_fail():
    comm = RivetCommunicator("chatRoom", ["swept"], params={"name": "ann"})
    init = await comm.handshake()
    conn_id = uuid.UUID(init["connection_id"])
    assert conn_id in heartbeat
    # The row goes as if a sweep had run while this process was stalled.
    await sync_to_async(Connection.objects.filter(pk=conn_id).delete)()
    action_id = await comm.send_action("whoami")
    frame = await comm.receive_frame()
    assert (frame["code"], frame["action_id"]) == ("connection_expired", action_id)
    assert await comm.receive_close() == 4410  # the client reconnects
    await comm.disconnect()
    assert conn_id not in heartbeat


async def test_sweep_tells_a_live_process_to_close_the_socket():
    comm = RivetCommunicator("chatRoom", ["told"], params={"name": "ann"})
    await comm.handshake()
    with freeze_time(clock.now() + stale_after() + 1):
        assert await sync_to_async(sweep_stale_connections)() == 1
    assert await comm.receive_close() == 1000
    await comm.disconnect()


async def test_heartbeat_refreshes_open_connections():
    from django.test import override_settings

    with override_settings(RIVET={"SWEEP_INTERVAL": 0.05}):
        comm = RivetCommunicator("chatRoom", ["beat"], params={"name": "ann"})
        init = await comm.handshake()
        rows = Connection.objects.filter(pk=uuid.UUID(init["connection_id"]))
        first = await sync_to_async(lambda: rows.get().last_seen_at)()
        await await_for(
            sync_to_async(lambda: rows.get().last_seen_at > first),
            what="a heartbeat refreshing the row",
        )
        await comm.disconnect()


def test_the_periodic_sweep_removes_connections_of_crashed_processes():
    with freeze_time() as frozen:
        connect(params={"name": "ann"}, server_id="crashed")
        assert sweeper.sweep()["connections"] == 0
        frozen.advance(stale_after() + 1)
        assert sweeper.sweep()["connections"] == 1
    assert not Connection.objects.exists()
    assert actors.get("chatRoom", "room").call("log")[-1] == ["disconnect", "ann"]
