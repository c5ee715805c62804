"""End to end: a real daphne process, driven by the Python client.

HTTP and WebSocket go over real sockets to ``daphne tests.support.asgi:application``
running against the test database; nothing is mocked.
"""

import asyncio
import threading

import pytest

from django_rivet import (
    ActionNotFound,
    ActorAlreadyExists,
    ActorNotFound,
    Forbidden,
    InvalidArgs,
    UserError,
    actors,
)
from django_rivet.client import Client, ConnectionLost
from django_rivet.exceptions import EventLogTruncated
from tests.support.client import assert_errors_are_rebuilt
from tests.support.polling import await_for
from tests.support.servers import (
    daphne_process,
    free_port,
    kill9,
    server_env,
    wait_until_no_connection_rows,
)

pytestmark = [pytest.mark.servers, pytest.mark.django_db(transaction=True)]


@pytest.fixture
async def client(server):
    client = Client(server + "/rivet")
    yield client
    await client.aclose()
    await wait_until_no_connection_rows()


# -- HTTP -------------------------------------------------------------------------
def test_http_actions_and_lifecycle(client):
    counter = client.actor("counter", ["e2e", "http"])
    assert counter.call("increment", 2) == 2
    assert counter.call("getCount") == 2
    info = counter.get()
    assert (info["name"], info["key"]) == ("counter", ["e2e", "http"])
    assert counter.get_or_create() == {"actor_id": info["actor_id"], "created": False}
    with pytest.raises(ActorAlreadyExists):
        counter.create()
    fresh = client.actor("counter", "fresh")
    assert fresh.create() != info["actor_id"]
    by_id = client.actor("counter", actor_id=info["actor_id"])
    assert by_id.call("getCount") == 2


def test_http_errors_are_rebuilt_as_their_classes(client):
    assert_errors_are_rebuilt(client)


def test_http_cbor_round_trips_bytes(server):
    with Client(server + "/rivet", encoding="cbor") as client:
        assert client.actor("chatRoom", "cbor").call("echo", b"\x00\xff") == b"\x00\xff"


async def test_async_http_and_raw_request(client):
    room = client.actor("chatRoom", "async-http")
    assert await room.acall("send_message", "hi") == 1
    assert await room.acall("history") == [["http", "hi"]]
    response = await room.arequest("GET", "a/b")
    assert response.json()["path"] == "a/b"
    await client.aclose()


# -- WebSocket ------------------------------------------------------------------------
async def test_websocket_actions_events_and_conn_state(client):
    room = client.actor("chatRoom", "ws")
    ann = await room.connect({"name": "ann"})
    bob = await room.connect({"name": "bob"})
    seen, left = [], []
    ann.on("newMessage", lambda author, text: seen.append((author, text)))
    ann.on("left", left.append)
    # Frames of one connection are handled in order: once this answers, the
    # subscriptions above are in place.
    assert await ann.call("names") == ["ann", "bob"]
    assert await bob.call("send_message", "hello") == 1
    await await_for(lambda: seen == [("bob", "hello")])
    assert (await bob.call("whoami"))["state"] == {"name": "bob", "sent": 1}
    whispers = []
    bob.on("whisper", lambda sender, text: whispers.append((sender, text)))
    assert await ann.call("whisper", "bob", "psst") == 1
    await await_for(lambda: whispers == [("ann", "psst")])
    await bob.close()
    await await_for(lambda: left == ["bob"])
    assert await ann.call("names") == ["ann"]
    await ann.close()
    assert ann.status == "disconnected"


async def test_websocket_unsubscribe_stops_delivery(client):
    conn = await client.actor("counter", "ws-unsub").connect()
    values = []
    unsubscribe = conn.on("changed", values.append)
    await conn.call("increment")
    await await_for(lambda: values == [1])
    unsubscribe()
    await conn.call("increment")
    conn.on("changed", values.append)
    await conn.call("increment")
    await await_for(lambda: values == [1, 3])
    await conn.close()


async def test_websocket_actions_answer_in_order(client):
    conn = await client.actor("chatRoom", "ws-order").connect({"name": "ann"})
    results = await asyncio.gather(
        conn.call("slow", 0.2, "a"), conn.call("slow", 0, "b"), conn.call("echo", "c")
    )
    assert results == ["a", "b", "c"]
    log = await conn.call("log")
    assert [entry[1] for entry in log if entry[0] == "slow"] == ["a", "b"]
    await conn.close()


async def test_websocket_errors(client):
    with pytest.raises(UserError) as refused:
        await client.actor("chatRoom", "private").connect({"name": "eve"})
    assert refused.value.code == "token_required"
    with pytest.raises(Forbidden):
        await client.actor("vault", "closed").connect()
    with pytest.raises(UserError) as banned:
        await client.actor("chatRoom", "ws-err").connect({"name": "banned"})
    assert banned.value.code == "banned"
    with pytest.raises(ActorNotFound):
        await client.actor("noSuchActor", "x").connect()
    conn = await client.actor("chatRoom", "ws-err").connect({"name": "ann"})
    with pytest.raises(ActionNotFound):
        await conn.call("nope")
    await conn.close()


async def test_websocket_errors_keep_the_connection(client):
    conn = await client.actor("counter", "ws-err2").connect()
    with pytest.raises(UserError):
        await conn.call("add_note_then_fail", "x")
    with pytest.raises(InvalidArgs):
        await conn.call("increment", "x")
    assert await conn.call("increment") == 1
    await conn.close()


async def test_kick_closes_without_reconnecting(client):
    room = client.actor("chatRoom", "ws-kick")
    ann = await room.connect({"name": "ann"})
    bob = await room.connect({"name": "bob"})
    assert await ann.call("kick", "bob") == 1
    await await_for(lambda: bob.status == "disconnected")
    assert bob.close_code == 1000
    with pytest.raises(ConnectionLost):
        await bob.call("names")
    await await_for(lambda: ann.status == "connected")

    # The kicked socket is closed first; its on_disconnect runs right after.
    async def bob_gone():
        return await ann.call("names") == ["ann"]

    await await_for(bob_gone, what="bob's on_disconnect")
    await ann.close()


async def test_destroy_over_a_websocket_is_answered_before_the_close(client):
    conn = await client.actor("stateWatcher", "ws-destroy").connect()
    assert await conn.call("destroy") == "destroyed"
    await await_for(lambda: conn.status == "disconnected")
    assert conn.close_code == 1000
    with pytest.raises(ActorNotFound):
        await client.actor("stateWatcher", "ws-destroy", create=False).acall("changes")


def test_sync_connection(client):
    room = client.actor("chatRoom", "sync")
    received = threading.Event()
    messages = []

    def on_message(author, text):
        messages.append((author, text))
        received.set()

    with room.connect_sync({"name": "ann"}) as conn:
        assert conn.status == "connected"
        conn.on("newMessage", on_message)
        assert conn.call("send_message", "hi") == 1
        assert received.wait(10)
        assert messages == [("ann", "hi")]
        assert conn.call("whoami")["state"]["sent"] == 1
    assert conn.status == "disconnected"


# -- replay ---------------------------------------------------------------------------
async def test_connect_with_since_replays_missed_events(client):
    counter = client.actor("counter", "since")
    conn = await counter.connect()
    values = []
    conn.on("changed", values.append)
    await conn.call("increment")
    await await_for(lambda: values == [1])
    last = conn.last_seq
    await conn.close()
    for _ in range(3):
        await counter.acall("increment")
    again = await counter.connect(since=last)
    replayed = []
    again.on("changed", replayed.append)
    await await_for(lambda: replayed == [2, 3, 4])
    await again.call("increment")
    await await_for(lambda: replayed == [2, 3, 4, 5])
    await again.close()


async def test_truncated_log_is_reported_as_a_connection_error(client):
    counter = client.actor("counter", "truncated")
    await counter.acall("increment")
    conn = await counter.connect(since=99)
    await conn.call("getCount")  # frames arrive in order: the error came first
    assert [type(error) for error in conn.errors] == [EventLogTruncated]
    await conn.close()


async def test_client_reconnects_after_a_crash_and_replays(django_db_blocker):
    """Kill daphne, write events while it is down, restart it: no gap, no dup."""
    port = free_port()
    with django_db_blocker.unblock():
        env = server_env()
    with daphne_process(env, port=port) as (url, proc):
        client = Client(url + "/rivet")
        conn = await client.actor("counter", "crash").connect()
        values = []
        conn.on("changed", values.append)
        await conn.call("increment")
        await await_for(lambda: values == [1])
        kill9(proc)
        await await_for(lambda: conn.status == "connecting")
        with django_db_blocker.unblock():
            handle = await actors.aget_or_create("counter", "crash")
            for _ in range(2):
                await handle.acall("increment")
    with daphne_process(env, port=port):
        await await_for(lambda: conn.status == "connected")
        await await_for(lambda: values == [1, 2, 3])
        await conn.call("increment")
        await await_for(lambda: values == [1, 2, 3, 4])
        await conn.close()
