"""DjangoDriver against the engine's driver contract, plus its own rules.

The contract mixin is the one the in-memory driver passes
(``tests/engine/driver_contract.py``); here it runs on the test database,
so ``make test`` checks it on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_rivet import workflows
from django_rivet.clock import freeze_time, to_datetime
from django_rivet.engine import StorageError, StorageLimitError, keys
from django_rivet.models import Workflow, WorkflowKV, WorkflowMessage
from django_rivet.testing import run_until_idle
from django_rivet.workflows import leases
from django_rivet.workflows.driver import (
    ATOMIC_FLUSH_MAX_WRITES,
    DjangoDriver,
    LeaseLost,
    prefix_end,
)
from tests.engine.driver_contract import EngineDriverContract

# pg: the PostgreSQL leg runs this module (the driver's raw SQL (lease renewal,
# upserts)).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

START = 1_700_000_000.0


def k(*parts) -> bytes:
    return keys.pack(parts)


@pytest.fixture
def clock():
    with freeze_time(START) as frozen:
        yield frozen


def make_workflow(workflow_id: str = "wf-driver") -> Workflow:
    return Workflow.objects.create(id=workflow_id, name="greet", wake_at=None)


class TestDjangoDriver(EngineDriverContract):
    def make_driver(self):
        make_workflow()
        return DjangoDriver("wf-driver")

    async def test_keys_are_scoped_to_one_workflow(self, subject):
        await subject.set(k(1), b"mine")
        from asgiref.sync import sync_to_async

        await sync_to_async(make_workflow)("wf-other")
        other = DjangoDriver("wf-other")
        assert await other.get(k(1)) is None
        await other.set(k(1), b"theirs")
        await other.delete_prefix(b"")
        assert await subject.get(k(1)) == b"mine"

    async def test_a_batch_with_a_key_twice_keeps_the_last_value(self, subject):
        await subject.batch([(k(1), b"a"), (k(1), b"b")])
        assert await subject.get(k(1)) == b"b"

    async def test_alarms_are_recorded_for_the_release(self, subject):
        assert not subject.alarm_set
        await subject.set_alarm("wf-driver", START + 5)
        assert (subject.alarm, subject.alarm_set) == (START + 5, True)
        await subject.clear_alarm("wf-driver")
        assert (subject.alarm, subject.alarm_set) == (None, True)


class TestDjangoDriverOnAPrivateLoop(EngineDriverContract):
    """The runtime's mode: database work inline, on the loop's own thread."""

    def make_driver(self):
        make_workflow()
        return DjangoDriver("wf-driver", private_loop=True)


def test_prefix_end_bounds_a_prefix():
    assert prefix_end(b"\x01\x02") == b"\x01\x03"
    assert prefix_end(b"\x01\xff") == b"\x02"
    assert prefix_end(b"\xff\xff") is None


def test_the_default_driver_lets_the_engine_chunk_flushes(clock):
    assert DjangoDriver("x").atomic_batch is False
    with override_settings(RIVET={"KV_ATOMIC_FLUSH": True}):
        assert DjangoDriver("x").atomic_batch is True


async def test_an_atomic_driver_rejects_an_oversized_flush_whole(clock):
    from asgiref.sync import sync_to_async

    await sync_to_async(make_workflow)()
    driver = DjangoDriver("wf-driver", atomic_batch=True)
    writes = [(k(2, i), b"v") for i in range(ATOMIC_FLUSH_MAX_WRITES + 1)]
    with pytest.raises(StorageLimitError):
        await driver.batch(writes)
    assert await driver.list(b"") == []
    await driver.batch(writes[:500])  # more than a chunk, in one transaction
    assert len(await driver.list(b"")) == 500


async def test_writes_are_fenced_by_the_lease(clock):
    from asgiref.sync import sync_to_async

    await sync_to_async(Workflow.objects.create)(
        id="wf-fenced", name="greet", wake_at=clock.datetime()
    )
    lease = await sync_to_async(leases.claim)("wf-fenced")
    driver = DjangoDriver("wf-fenced", lease_token=lease.token)
    await driver.set(k(1), b"held")
    # The lease expires and a successor claims the workflow.
    clock.advance(leases.lease_seconds() + 1)
    successor = await sync_to_async(leases.claim)("wf-fenced")
    assert successor is not None
    with pytest.raises(LeaseLost):
        await driver.set(k(1), b"stale")
    with pytest.raises(LeaseLost):
        await driver.run_transactional(lambda: "out", lambda out: [(k(2), b"x")])
    assert isinstance(LeaseLost(), StorageError)
    assert await driver.get(k(1)) == b"held"


async def test_a_requested_cancel_fences_the_run_out(clock):
    from asgiref.sync import sync_to_async

    await sync_to_async(Workflow.objects.create)(
        id="wf-cancel", name="greet", wake_at=clock.datetime()
    )
    lease = await sync_to_async(leases.claim)("wf-cancel")
    driver = DjangoDriver("wf-cancel", lease_token=lease.token)
    await sync_to_async(Workflow.objects.filter(pk="wf-cancel").update)(
        cancel_requested=True
    )
    with pytest.raises(LeaseLost):
        await driver.batch([(k(1), b"x")])
    canceller = DjangoDriver("wf-cancel", lease_token=lease.token, stop_on_cancel=False)
    await canceller.set(k(1), b"cancelled")


async def test_the_cancel_check_before_a_step_reads_a_committed_cancel(clock):
    from asgiref.sync import sync_to_async

    await sync_to_async(Workflow.objects.create)(
        id="wf-check", name="greet", wake_at=clock.datetime()
    )
    lease = await sync_to_async(leases.claim)("wf-check")
    driver = DjangoDriver("wf-check", lease_token=lease.token)
    await driver.check_cancel()  # held, not cancelled: nothing to say
    await sync_to_async(Workflow.objects.filter(pk="wf-check").update)(
        cancel_requested=True
    )
    with pytest.raises(LeaseLost):
        await driver.check_cancel()
    # The drivers that carry a cancel out, and those without a lease, go on.
    await DjangoDriver(
        "wf-check", lease_token=lease.token, stop_on_cancel=False
    ).check_cancel()
    await DjangoDriver("wf-check").check_cancel()


async def test_writes_renew_the_lease(clock):
    from asgiref.sync import sync_to_async

    await sync_to_async(Workflow.objects.create)(
        id="wf-renew", name="greet", wake_at=clock.datetime()
    )
    lease = await sync_to_async(leases.claim)("wf-renew")
    driver = DjangoDriver("wf-renew", lease_token=lease.token)
    clock.advance(leases.lease_seconds() - 1)
    await driver.set(k(1), b"x")
    clock.advance(leases.lease_seconds() - 1)  # past the first expiry
    assert await sync_to_async(leases.claim)("wf-renew") is None
    await driver.set(k(1), b"y")


async def test_database_errors_surface_as_storage_errors(clock, monkeypatch):
    from django.db import OperationalError

    def broken(self, writes, removing=(), connection=None):
        raise OperationalError("disk I/O error")

    from asgiref.sync import sync_to_async

    await sync_to_async(make_workflow)()
    monkeypatch.setattr(DjangoDriver, "_upsert", broken)
    with pytest.raises(StorageError):
        await DjangoDriver("wf-driver").batch([(k(1), b"x")])


async def test_message_bodies_must_be_storable(clock):
    from asgiref.sync import sync_to_async

    await sync_to_async(make_workflow)()
    with pytest.raises(TypeError):
        await DjangoDriver("wf-driver").add_message("m", object())


def test_kv_rows_go_with_their_workflow(clock):
    Workflow.objects.create(id="wf-gone", name="greet")
    WorkflowKV.objects.create(workflow_id="wf-gone", key=k(1), value=b"x")
    Workflow.objects.filter(pk="wf-gone").delete()
    assert not WorkflowKV.objects.exists()


def _message_deletes(queries) -> list[str]:
    table = WorkflowMessage._meta.db_table
    return [
        query["sql"]
        for query in queries
        if query["sql"].startswith("DELETE") and table in query["sql"]
    ]


def test_a_wake_up_completes_only_the_messages_still_in_the_inbox(clock):
    # Every wake-up replays the messages history received; before, each one
    # was completed again: one DELETE per message ever received, per run.
    handle = workflows.start("listener")
    assert run_until_idle(handle) == "sleeping"
    for index in range(5):
        handle.send("ping", index)
        assert run_until_idle(handle) == "sleeping"
    handle.send("ping", 5)
    with CaptureQueriesContext(connection) as queries:
        assert run_until_idle(handle) == "sleeping"
    assert len(_message_deletes(queries.captured_queries)) == 1  # the new one
    assert not WorkflowMessage.objects.filter(workflow_id=handle.workflow_id).exists()


def test_a_received_message_whose_completion_was_lost_is_completed_by_the_replay(clock):
    handle = workflows.start("listener")
    assert run_until_idle(handle) == "sleeping"
    handle.send("ping", 1)
    lost = WorkflowMessage.objects.get(workflow_id=handle.workflow_id)
    assert run_until_idle(handle) == "sleeping"
    # The run recorded it, then its completion was lost (a crash in between):
    # the row is back in the inbox.
    lost.save(force_insert=True)
    handle.send("ping", 2)
    assert run_until_idle(handle) == "sleeping"
    assert not WorkflowMessage.objects.filter(workflow_id=handle.workflow_id).exists()


async def _lease_row(workflow_id: str) -> Workflow:
    from asgiref.sync import sync_to_async

    return await sync_to_async(Workflow.objects.get)(pk=workflow_id)


async def _claimed(clock, workflow_id: str) -> DjangoDriver:
    from asgiref.sync import sync_to_async

    await sync_to_async(Workflow.objects.create)(
        id=workflow_id, name="greet", wake_at=clock.datetime()
    )
    lease = await sync_to_async(leases.claim)(workflow_id)
    return DjangoDriver(workflow_id, lease_token=lease.token)


async def test_writes_between_renewals_check_the_lease_without_rewriting_it(clock):
    driver = await _claimed(clock, "wf-between")
    await driver.set(k(1), b"a")  # renews
    renewed = (await _lease_row("wf-between")).lease_expires_at
    clock.advance(leases.lease_seconds() / 3 - 1)
    await driver.batch([(k(1), b"b"), (k(2), b"c")])
    await driver.delete(k(2))
    assert (await _lease_row("wf-between")).lease_expires_at == renewed
    clock.advance(2)  # a third of the lease since the renewal: renew again
    await driver.set(k(1), b"d")
    assert (await _lease_row("wf-between")).lease_expires_at == to_datetime(
        clock.now() + leases.lease_seconds()
    )
    assert await driver.list(b"") == [(k(1), b"d")]


async def test_a_lease_taken_between_renewals_fences_the_writes_out(clock):
    from asgiref.sync import sync_to_async

    driver = await _claimed(clock, "wf-taken")
    await driver.set(k(1), b"held")
    # Another worker holds it now (its claim wrote a new token).
    await sync_to_async(Workflow.objects.filter(pk="wf-taken").update)(
        lease_token="successor"
    )
    with pytest.raises(LeaseLost):
        await driver.set(k(1), b"stale")
    with pytest.raises(LeaseLost):
        await driver.batch([(k(2), b"stale")])
    with pytest.raises(LeaseLost):
        await driver.delete(k(1))
    with pytest.raises(LeaseLost):  # several statements in one transaction
        await driver.batch([(k(2, index), b"stale") for index in range(300)])
    assert await driver.list(b"") == [(k(1), b"held")]


async def test_a_lost_lease_neither_records_nor_removes_a_received_message(clock):
    from asgiref.sync import sync_to_async

    driver = await _claimed(clock, "wf-receipt")
    message_id = await driver.add_message("m", 1)
    [message] = await driver.receive_messages(None, 1, True)
    await sync_to_async(Workflow.objects.filter(pk="wf-receipt").update)(
        lease_token="successor"
    )
    with pytest.raises(LeaseLost):
        await driver.batch_completing([(k(1), b"received")], [message.id])
    assert await driver.list(b"") == []
    [still] = await driver.receive_messages(None, 1, True)
    assert still.id == message_id


async def test_a_large_write_between_renewals_lands_whole(clock):
    driver = await _claimed(clock, "wf-large")
    await driver.set(k(1), b"renewed")
    writes = [(k(2, index), b"v%d" % index) for index in range(300)]
    await driver.batch(writes)  # two statements, the first one checked
    assert await driver.list(keys.pack((2,))) == writes


async def test_a_cancel_between_renewals_fences_the_run_out(clock):
    from asgiref.sync import sync_to_async

    driver = await _claimed(clock, "wf-cancelled")
    await driver.set(k(1), b"held")
    await sync_to_async(Workflow.objects.filter(pk="wf-cancelled").update)(
        cancel_requested=True
    )
    with pytest.raises(LeaseLost):
        await driver.batch([(k(1), b"late")])
    assert await driver.get(k(1)) == b"held"


# -- new keys: a plain INSERT first ----------------------------------------------------
def _claimed_here(clock, workflow_id: str) -> DjangoDriver:
    """A run's driver whose database work runs in this thread (a worker's)."""
    Workflow.objects.create(id=workflow_id, name="greet", wake_at=clock.datetime())
    lease = leases.claim(workflow_id)
    return DjangoDriver(workflow_id, lease_token=lease.token, private_loop=True)


def _row_writes(queries) -> list[str]:
    """The statements that wrote KV rows (failed ones included)."""
    table = WorkflowKV._meta.db_table
    return [
        query["sql"]
        for query in queries
        if query["sql"].startswith(("INSERT", "WITH")) and table in query["sql"]
    ]


def _stored(workflow_id: str) -> dict[bytes, bytes]:
    rows = WorkflowKV.objects.filter(workflow_id=workflow_id)
    return {bytes(row.key): bytes(row.value) for row in rows}


def test_new_keys_are_inserted_without_a_conflict_check(clock):
    # Most writes of a run are new entries: ON CONFLICT's check was 15% of
    # writing a long history on PostgreSQL (bench P4).
    driver = _claimed_here(clock, "wf-fresh")
    asyncio.run(driver.set(k(1), b"a"))  # renews the lease, in a transaction
    with CaptureQueriesContext(connection) as queries:
        asyncio.run(driver.batch([(k(2), b"b"), (k(3), b"c")]))
        asyncio.run(driver.set(k(1), b"d"))  # a key it wrote: upserted at once
    new, known = _row_writes(queries.captured_queries)
    assert "ON CONFLICT" not in new
    assert "ON CONFLICT" in known
    assert _stored("wf-fresh") == {k(1): b"d", k(2): b"b", k(3): b"c"}


def test_a_stored_key_the_run_never_saw_is_overwritten(clock):
    first = _claimed_here(clock, "wf-unseen")
    asyncio.run(first.set(k(1), b"old"))
    # The next run's driver, before it listed the history.
    run = DjangoDriver("wf-unseen", lease_token=first.lease_token, private_loop=True)
    asyncio.run(run.set(k(9), b"renewed"))
    with CaptureQueriesContext(connection) as queries:
        asyncio.run(run.batch([(k(1), b"new"), (k(2), b"x")]))
    refused, upsert = _row_writes(queries.captured_queries)
    assert "ON CONFLICT" not in refused and "ON CONFLICT" in upsert
    assert _stored("wf-unseen") == {k(1): b"new", k(2): b"x", k(9): b"renewed"}
    # Known now: the next write of it goes straight to the upsert.
    with CaptureQueriesContext(connection) as queries:
        asyncio.run(run.batch([(k(1), b"newer")]))
    assert len(_row_writes(queries.captured_queries)) == 1


def test_a_run_that_listed_the_history_upserts_what_it_found(clock):
    first = _claimed_here(clock, "wf-listed")
    asyncio.run(first.batch([(k(1), b"a"), (k(2), b"b")]))
    run = DjangoDriver("wf-listed", lease_token=first.lease_token, private_loop=True)
    asyncio.run(run.list(b""))
    asyncio.run(run.set(k(9), b"renewed"))
    with CaptureQueriesContext(connection) as queries:
        asyncio.run(run.batch([(k(2), b"B"), (k(3), b"c")]))
    (upsert,) = _row_writes(queries.captured_queries)
    assert "ON CONFLICT" in upsert
    assert _stored("wf-listed") == {
        k(1): b"a", k(2): b"B", k(3): b"c", k(9): b"renewed"
    }  # fmt: skip


def test_a_lost_lease_fences_out_a_write_over_a_key_the_run_never_saw(clock):
    first = _claimed_here(clock, "wf-unseen-lost")
    asyncio.run(first.set(k(1), b"held"))
    run = DjangoDriver(
        "wf-unseen-lost", lease_token=first.lease_token, private_loop=True
    )
    asyncio.run(run.set(k(9), b"renewed"))
    Workflow.objects.filter(pk="wf-unseen-lost").update(lease_token="successor")
    with pytest.raises(LeaseLost):
        asyncio.run(run.batch([(k(1), b"stale"), (k(2), b"stale")]))
    assert _stored("wf-unseen-lost") == {k(1): b"held", k(9): b"renewed"}


# -- the release: the run's last batch rides in its transaction ----------------------
def test_a_quiet_release_writes_the_last_batch_without_a_lease_check_of_its_own(clock):
    """The release's UPDATE matched the token and holds the row: enough."""
    from django_rivet.workflows import execution

    handle = workflows.start("greet", {"name": "Ada"})
    with CaptureQueriesContext(connection) as queries:
        assert execution.run(handle.workflow_id) == "completed"
    statements = [query["sql"] for query in queries.captured_queries]
    last = _row_writes(queries.captured_queries)[-1]
    release = statements[statements.index(last) - 1]
    lease_table = f'"{Workflow._meta.db_table}"'
    assert release.startswith(f"UPDATE {lease_table}") and "RETURNING" in release
    assert lease_table not in last  # no check of its own: the UPDATE's holds
    assert handle.result() == "hello Ada"


def test_a_release_after_an_arrival_still_fences_the_last_batch(clock):
    """A cancel that came while the run held the lease drops its last batch."""
    driver = _claimed_here(clock, "wf-late")
    lease_row = Workflow.objects.get(pk="wf-late")
    lease = leases.Lease(
        "wf-late", lease_row.lease_token, "greet", "running", None,
        lease_row.wake_signal, False, 0, run=True,
    )  # fmt: skip
    driver.defer_next_batch()
    asyncio.run(driver.batch([(k(1), b"last")]))
    assert _stored("wf-late") == {}  # held for the release
    Workflow.objects.filter(pk="wf-late").update(cancel_requested=True)
    with pytest.raises(LeaseLost), transaction.atomic():
        leases.release(lease, write=driver.write_held, status="sleeping")
    assert _stored("wf-late") == {}


async def _cancel(workflow_id: str) -> None:
    from asgiref.sync import sync_to_async

    await sync_to_async(Workflow.objects.filter(pk=workflow_id).update)(
        cancel_requested=True
    )


@pytest.fixture
def cancel_reads(monkeypatch) -> list[str]:
    """The reads of the row the cancel check makes (each workflow id)."""
    from django_rivet.workflows.fencing import LeaseFence

    made: list[str] = []
    plain = LeaseFence.check_not_cancelled

    def counted(fence: LeaseFence) -> None:
        made.append(fence.workflow_id)
        plain(fence)

    monkeypatch.setattr(LeaseFence, "check_not_cancelled", counted)
    return made


async def test_the_history_load_reads_the_first_steps_cancel_check(clock, cancel_reads):
    driver = await _claimed(clock, "wf-load-check")
    await driver.set(k(1), b"input")
    loaded = DjangoDriver("wf-load-check", lease_token=driver.lease_token)
    assert await loaded.list(b"") == [(k(1), b"input")]
    await loaded.check_cancel()  # the load's read of the row stands in
    assert cancel_reads == []
    await _cancel("wf-load-check")
    with pytest.raises(LeaseLost):  # once only: the next step reads again
        await loaded.check_cancel()
    assert cancel_reads == ["wf-load-check"]


async def test_a_cancel_before_the_history_load_stops_the_first_step(
    clock, cancel_reads
):
    driver = await _claimed(clock, "wf-load-cancelled")
    await driver.set(k(1), b"input")
    await _cancel("wf-load-cancelled")
    loaded = DjangoDriver("wf-load-cancelled", lease_token=driver.lease_token)
    # The history still loads (the run carrying a cancel out needs it) ...
    assert await loaded.list(b"") == [(k(1), b"input")]
    with pytest.raises(LeaseLost):  # ... and the step's check reads the cancel
        await loaded.check_cancel()
    assert cancel_reads == ["wf-load-cancelled"]


async def test_the_load_stands_in_only_for_a_check_right_after_it(
    clock, cancel_reads, monkeypatch
):
    from django_rivet.workflows import fencing

    driver = await _claimed(clock, "wf-load-stale")
    await driver.set(k(1), b"input")
    # Another database call in between: the check reads the row.
    loaded = DjangoDriver("wf-load-stale", lease_token=driver.lease_token)
    await loaded.list(b"")
    await loaded.get(k(1))
    await loaded.check_cancel()
    assert cancel_reads == ["wf-load-stale"]
    # Too long in between (a long replay): the check reads the row.
    monkeypatch.setattr(fencing, "CANCEL_CHECK_FRESH", 0.0)
    await loaded.list(b"")
    await _cancel("wf-load-stale")
    with pytest.raises(LeaseLost):
        await loaded.check_cancel()
    assert cancel_reads == ["wf-load-stale", "wf-load-stale"]


async def test_a_steps_write_stands_in_for_the_next_steps_cancel_check(
    clock, cancel_reads, monkeypatch
):
    from django_rivet.workflows import fencing

    driver = await _claimed(clock, "wf-write-check")
    await driver.batch([(k(1), b"step one")])  # checked "held, no cancel"
    await driver.check_cancel()  # the write's check stands in
    assert cancel_reads == []
    await driver.check_cancel()  # once only: the next check reads
    assert cancel_reads == ["wf-write-check"]
    # A cancel after the write: past the window, the step reads it.
    await driver.batch([(k(2), b"step two")])
    await _cancel("wf-write-check")
    monkeypatch.setattr(fencing, "CANCEL_CHECK_FRESH", 0.0)
    with pytest.raises(LeaseLost):
        await driver.check_cancel()
    assert cancel_reads == ["wf-write-check"] * 2
    # A write while the cancel is pending lands nowhere, and stands in for none.
    monkeypatch.setattr(fencing, "CANCEL_CHECK_FRESH", 60.0)
    with pytest.raises(LeaseLost):
        await driver.batch([(k(3), b"step three")])
    with pytest.raises(LeaseLost):
        await driver.check_cancel()
    assert cancel_reads == ["wf-write-check"] * 3
    from asgiref.sync import sync_to_async

    assert set(await sync_to_async(_stored)("wf-write-check")) == {k(1), k(2)}


async def test_the_inbox_read_that_finds_a_message_carries_the_cancel_check(
    clock, cancel_reads
):
    from asgiref.sync import sync_to_async

    driver = await _claimed(clock, "wf-inbox-check")
    assert await driver.receive_messages(None, 1, True) == []
    await driver.check_cancel()  # nothing received: the step reads
    assert cancel_reads == ["wf-inbox-check"]
    send = sync_to_async(lambda name: workflows.get("wf-inbox-check").send(name, 1))
    await send("go")
    [message] = await driver.receive_messages(None, 1, True)
    assert message.name == "go"
    await driver.check_cancel()  # the read found the message and the lease
    assert cancel_reads == ["wf-inbox-check"]
    # A cancel pending: the read still returns the message, not the check.
    await send("again")
    await _cancel("wf-inbox-check")
    assert [m.name for m in await driver.receive_messages(["again"], 1, True)] == [
        "again"
    ]
    with pytest.raises(LeaseLost):
        await driver.check_cancel()
    assert cancel_reads == ["wf-inbox-check"] * 2


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="only PostgreSQL's send hands over"
)
async def test_a_handed_message_carries_the_cancel_check_its_send_made(
    clock, cancel_reads, settings, monkeypatch
):
    from asgiref.sync import sync_to_async

    from django_rivet.workflows.inbox import InboxMethods

    reads: list[str] = []
    knowing_read = InboxMethods._oldest_knowing

    def counted(self: DjangoDriver, *args: Any) -> Any:
        reads.append(self.workflow_id)
        return knowing_read(self, *args)

    monkeypatch.setattr(InboxMethods, "_oldest_knowing", counted)
    settings.RIVET = {**settings.RIVET, "WORKFLOW_LIVE_WAIT": 60}
    driver = await _claimed(clock, "wf-handed")
    driver.open_handoff()  # (a live run's first wait)
    try:
        assert await driver.receive_messages(None, 1, True) == []  # reads: empty
        send = sync_to_async(lambda name: workflows.get("wf-handed").send(name, 1))
        await send("go")
        [message] = await driver.receive_messages(None, 1, True)
        assert (message.name, reads) == ("go", ["wf-handed"])  # no read: handed
        await driver.check_cancel()  # the send saw the lease held, no cancel
        assert cancel_reads == []
        # A cancel before the send: the message is handed over, the check not.
        await _cancel("wf-handed")
        await send("again")
        [message] = await driver.receive_messages(["again"], 1, True)
        assert (message.name, reads) == ("again", ["wf-handed"])
        with pytest.raises(LeaseLost):
            await driver.check_cancel()
        assert cancel_reads == ["wf-handed"]
    finally:
        driver.close_handoff()


def test_a_workflow_of_quick_steps_reads_its_row_before_no_step(
    cancel_reads, monkeypatch
):
    from django_rivet.workflows import fencing, registry, workflow

    @workflow(name="quickSteps")
    async def quick_steps(ctx, count):
        total = 0
        for index in range(count):
            total += await ctx.step(f"s{index}", lambda: 1)
        return total

    # A generous window: what is counted is which calls stand in, not timing.
    monkeypatch.setattr(fencing, "CANCEL_CHECK_FRESH", 60.0)
    with registry.register_temporarily(quick_steps):
        handle = workflows.start("quickSteps", 5)
        run_until_idle(handle)
    assert handle.result() == 5
    # The load stands in for the first step, each step's write for the next.
    assert cancel_reads == []


def test_only_a_write_that_made_its_check_stands_in_for_a_cancel_check(clock):
    from django_rivet.workflows.fencing import LeaseFence, WritePath

    driver = _claimed_here(clock, "wf-no-rows")
    fence = LeaseFence("wf-no-rows", driver.lease_token, True, 30.0)
    fence.write(lambda: None)  # renews: checked
    assert fence.take_check()
    assert fence.path(rows=1) is WritePath.AUTOCOMMIT_CHECKED
    fence.write(lambda: None, rows=1)  # no INSERT carried the check
    assert not fence.take_check()
