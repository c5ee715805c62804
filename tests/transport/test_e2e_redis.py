"""Across processes: two daphne servers sharing Redis (channels_redis).

A socket held by one process must see broadcasts from actions served by the
other, and ``conn.send`` / ``conn.disconnect`` must reach a socket held by
another process, all through the real Redis channel layer.
"""

import contextlib

import pytest

from django_rivet.client import Client
from tests.support.polling import await_for
from tests.support.servers import (
    daphne_server,
    server_env,
    wait_until_no_connection_rows,
)

pytestmark = [pytest.mark.servers, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def two_servers(redis_url, django_db_setup, django_db_blocker):
    """Daphne A and B on one database and one Redis."""
    with django_db_blocker.unblock():
        env = server_env(RIVET_TEST_REDIS_URL=redis_url)
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(daphne_server(env))
        b = stack.enter_context(daphne_server(env))
        yield a + "/rivet", b + "/rivet"


@pytest.fixture
async def clients(two_servers):
    """Fresh clients per test: async HTTP clients belong to one event loop."""
    a, b = Client(two_servers[0]), Client(two_servers[1])
    yield a, b
    await a.aclose()
    await b.aclose()
    await wait_until_no_connection_rows()


async def test_broadcast_from_a_reaches_a_socket_on_b(clients):
    a, b = clients
    conn = await b.actor("counter", "redis-broadcast").connect()
    values = []
    conn.on("changed", values.append)
    await conn.call("getCount")  # the subscription is in place
    assert await a.actor("counter", "redis-broadcast").acall("increment", 7) == 7
    await await_for(lambda: values == [7])
    assert conn.last_seq == 1
    await conn.close()


async def test_conn_send_and_disconnect_cross_processes(clients):
    a, b = clients
    ann = await a.actor("chatRoom", "redis-send").connect({"name": "ann"})
    bob = await b.actor("chatRoom", "redis-send").connect({"name": "bob"})
    whispers = []
    ann.on("whisper", lambda sender, text: whispers.append((sender, text)))
    # ctx.conns of an action served by B lists the socket held by A.
    assert await bob.call("names") == ["ann", "bob"]
    assert await bob.call("whisper", "ann", "from B") == 1
    await await_for(lambda: whispers == [("bob", "from B")])
    assert await bob.call("kick", "ann") == 1
    await await_for(lambda: ann.status == "disconnected")
    assert ann.close_code == 1000
    await bob.close()


async def test_replay_after_moving_to_the_other_process(clients):
    a, b = clients
    first = await a.actor("counter", "redis-move").connect()
    values = []
    first.on("changed", values.append)
    await first.call("increment")
    await await_for(lambda: values == [1])
    await first.close()
    await a.actor("counter", "redis-move").acall("increment")
    second = await b.actor("counter", "redis-move").connect(since=first.last_seq)
    second.on("changed", values.append)
    await await_for(lambda: values == [1, 2])
    await second.close()
