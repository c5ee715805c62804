"""Many async callers of one actor in one process: what each caller relies on.

Calls from async code (the HTTP views, the WebSocket consumers,
``handle.acall``) to one actor queue in this process's lane of that actor and
run one at a time; calls that queued while another ran share one transaction,
each in a savepoint of its own, and are answered once it commits. Whichever
way a call runs, it is atomic on its own, it is answered only once its
effects are committed, its broadcasts are logged in order, and a caller that
went away before its call started does not get it run.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections

from django_rivet import Actor, action, actors
from django_rivet.actors.kv import ActorKVStore
from django_rivet.encoding import cbor_loads
from django_rivet.exceptions import UserError
from django_rivet.models import Actor as ActorRow
from django_rivet.models import ActorEvent
from django_rivet.models.db import close_worker_connections
from django_rivet.testing import register_temporarily
from tests.testapp.models import Note

# pg: the PostgreSQL leg runs this module (savepoints inside a shared
# transaction; PostgreSQL aborts it on a failed statement).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


def committed_count(actor_id) -> int:
    """The count as committed, read on a connection of its own."""
    try:
        row = ActorRow.objects.get(pk=actor_id)
        return int(cbor_loads(bytes(row.state))["count"])
    finally:
        connections.close_all()


def logged_events(actor_id) -> list[tuple[int, list]]:
    rows = ActorEvent.objects.filter(actor_id=actor_id).order_by("seq")
    return [(row.seq, cbor_loads(bytes(row.args))) for row in rows]


async def test_concurrent_calls_each_count_once_and_log_in_order():
    handle = await actors.aget_or_create("counter", "lane-many")
    results = await asyncio.gather(*(handle.acall("increment") for _ in range(40)))
    assert sorted(results) == list(range(1, 41))
    assert await handle.acall("getCount") == 40
    # One broadcast per call, seq n carrying the count n.
    events = await sync_to_async(logged_events)(handle.actor_id)
    assert events == [(n, [n]) for n in range(1, 41)]


async def test_each_caller_is_answered_only_once_its_call_is_committed():
    handle = await actors.aget_or_create("counter", "lane-committed")
    seen: list[tuple[int, int]] = []

    async def call() -> None:
        count = await handle.acall("increment")
        committed = await sync_to_async(committed_count, thread_sensitive=False)(
            handle.actor_id
        )
        seen.append((count, committed))

    await asyncio.gather(*(call() for _ in range(30)))
    assert len(seen) == 30
    assert all(committed >= count for count, committed in seen), seen


async def test_a_failing_call_among_concurrent_ones_rolls_back_alone():
    handle = await actors.aget_or_create("counter", "lane-atomic")
    calls = [handle.acall("increment") for _ in range(10)]
    calls.append(handle.acall("add_note_then_fail", "lane"))
    calls += [handle.acall("increment") for _ in range(10)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    assert len(failures) == 1
    assert isinstance(failures[0], UserError) and failures[0].code == "refused"
    assert sorted(r for r in results if isinstance(r, int)) == list(range(1, 21))
    # Its state change, KV write and model write all rolled back; the other
    # twenty calls committed.
    assert await handle.acall("getCount") == 20
    assert not await Note.objects.filter(text="lane").aexists()
    kv = ActorKVStore(handle.actor_id)
    assert await sync_to_async(kv.get)("note") is None
    events = await sync_to_async(logged_events)(handle.actor_id)
    assert [seq for seq, _ in events] == list(range(1, 21))


class Turnstile(Actor):
    """``hold`` keeps the actor busy until the test lets it go."""

    name = "turnstile"
    initial_state = {"passed": 0}
    holding = threading.Event()
    release = threading.Event()

    @action
    def hold(self, ctx):
        self.holding.set()
        assert self.release.wait(30)
        return "held"

    @action
    def bump(self, ctx):
        ctx.state["passed"] += 1
        return ctx.state["passed"]

    @action
    def passed(self, ctx):
        return ctx.state["passed"]

    @action
    def spoil(self, ctx, text: str):
        # Writes everywhere, then a statement the database refuses (on
        # PostgreSQL that aborts the transaction it runs in).
        ctx.state["passed"] += 100
        ctx.kv.put("spoiled", text)
        Note.objects.create(text=text)
        Note.objects.create(text=None)

    @action
    def depth(self, ctx):
        return len(connection.savepoint_ids)


@contextlib.asynccontextmanager
async def turnstile_held(key):
    """Yield a turnstile's handle and its running ``hold`` call (a task).

    Calls made meanwhile queue behind it until ``Turnstile.release`` is set.
    """
    Turnstile.holding.clear()
    Turnstile.release.clear()
    with register_temporarily(Turnstile):
        handle = await actors.aget_or_create("turnstile", key)
        holder = asyncio.create_task(handle.acall("hold"))
        assert await asyncio.to_thread(Turnstile.holding.wait, 30)
        yield handle, holder


async def test_a_call_whose_caller_left_before_it_started_does_not_run():
    async with turnstile_held("left") as (handle, holder):
        waiting = asyncio.create_task(handle.acall("bump"))
        for _ in range(20):  # it queues behind the running call
            await asyncio.sleep(0)
        waiting.cancel()
        Turnstile.release.set()
        assert await holder == "held"
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # Every invocation thread idle: whatever was started has finished.
        await asyncio.to_thread(close_worker_connections)
        # The abandoned call never ran.
        assert await handle.acall("passed") == 0
        assert await handle.acall("bump") == 1


async def test_calls_served_in_one_transaction_answer_alone_when_a_neighbour_fails():
    async with turnstile_held("shared") as (handle, holder):
        # Queued behind the running call: the next round serves them together.
        names = [("depth",), ("bump",), ("spoil", "lane-spoil"), ("bump",), ("bump",)]
        calls = [asyncio.create_task(handle.acall(*call)) for call in names]
        for _ in range(20):
            await asyncio.sleep(0)
        Turnstile.release.set()
        assert await holder == "held"
        depth, first, spoiled, second, third = await asyncio.gather(
            *calls, return_exceptions=True
        )
        assert depth == 1  # a savepoint inside the round's transaction
        # The neighbours of the failed call are answered and committed...
        assert (first, second, third) == (1, 2, 3)
        assert isinstance(spoiled, Exception)
        assert await handle.acall("passed") == 3
        # ...and the failed call left nothing: state, KV and model writes.
        assert not await Note.objects.filter(text="lane-spoil").aexists()
        kv = ActorKVStore(handle.actor_id)
        assert await sync_to_async(kv.get)("spoiled") is None
