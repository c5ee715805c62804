"""Running workflows: leases, crash recovery, wake-ups, backoff, atomic flushes.

Everything here runs in-process on the virtual clock (``run_due`` is what the
worker loop and ``rivet_worker`` run); the real Celery worker tests are in
``test_celery.py``.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import OperationalError
from django.test import override_settings

from django_rivet import workflows
from django_rivet.engine import WorkflowCancelled
from django_rivet.engine.storage import MAX_KV_BATCH_ENTRIES, Storage
from django_rivet.models import Workflow, WorkflowStatus
from django_rivet.testing import freeze_time, run_due, run_until_idle
from django_rivet.upkeep.sweeper import sweep
from django_rivet.upkeep.worker import Worker, due_work
from django_rivet.workflows import execution, leases, registry, wakeups, workflow
from django_rivet.workflows.driver import DjangoDriver
from tests.testapp.models import StepRow

# pg: the PostgreSQL leg runs this module (leases claimed with SKIP LOCKED, atomic
# flushes).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


class Crash(BaseException):
    """The worker process dies here (nothing below it runs, nothing is released)."""


def row(workflow_id):
    return Workflow.objects.get(pk=workflow_id)


def rows_per_step(workflow_id):
    counts = {}
    for step in StepRow.objects.filter(workflow_id=workflow_id).values_list(
        "step", flat=True
    ):
        counts[step] = counts.get(step, 0) + 1
    return counts


@pytest.fixture
def clock():
    # A whole second, so times survive the database's microseconds exactly.
    with freeze_time(1_700_000_000.0) as frozen:
        yield frozen


@pytest.fixture
def sent(monkeypatch):
    """Celery tasks the runtime sends: (workflow_id, eta)."""
    calls = []
    monkeypatch.setattr(
        wakeups,
        "send_task",
        lambda workflow_id, eta: calls.append((workflow_id, eta)),
    )
    return calls


# -- leases ---------------------------------------------------------------------------
def test_a_leased_workflow_is_not_run_by_anyone_else(clock):
    handle = workflows.start("greet", {"name": "ann"}, id="leased")
    lease = leases.claim("leased")
    assert lease is not None and row("leased").status == WorkflowStatus.RUNNING
    assert leases.claim("leased") is None
    assert execution.run("leased") is None
    assert run_due() == 0
    leases.release(lease, status=WorkflowStatus.PENDING)
    assert run_until_idle(handle) == "completed"


def test_a_claim_inside_a_transaction_leaves_its_commit_durable(clock):
    """A run's claim alone need not wait for the disk; one in a transaction must.

    PostgreSQL: the claim that is its own transaction commits without
    waiting for the WAL flush (lost in a crash, the workflow is claimed
    again); inside the caller's transaction it must not change how that
    transaction commits.
    """
    from django.db import connection, transaction

    workflows.start("greet", {"name": "ann"}, id="in-atomic")
    postgresql = connection.vendor == "postgresql"
    with transaction.atomic(), connection.cursor() as cursor:
        if postgresql:  # the test server's default is off
            cursor.execute("SET LOCAL synchronous_commit TO on")
        lease = leases.claim("in-atomic")
        assert lease is not None and lease.name == "greet"
        if postgresql:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone()[0] == "on"
    leases.release(lease, status=WorkflowStatus.PENDING)
    alone = leases.claim("in-atomic")  # its own transaction
    assert alone is not None and alone.name == "greet"
    assert row("in-atomic").lease_token == alone.token


gate = threading.Event()
entered = threading.Event()


@workflow(name="gated")
async def gated(ctx, input):
    def wait_for_gate():
        entered.set()
        assert gate.wait(30)
        return "through"

    return await ctx.step("gate", wait_for_gate)


def test_two_workers_never_run_one_workflow_at_once():
    gate.clear()
    entered.clear()
    with registry.register_temporarily(gated):
        handle = workflows.start("gated", None, id="gated")
        results = []
        first = threading.Thread(target=lambda: results.append(execution.run("gated")))
        first.start()
        try:
            assert entered.wait(30)
            # Another worker gets the same task (a duplicate delivery).
            assert execution.run("gated") is None
            assert run_due() == 0
        finally:
            gate.set()
            first.join(30)
        assert results == ["completed"]
        assert handle.result() == "through"
        assert row("gated").run_count == 1


def test_a_cancel_lets_the_running_step_finish_and_refuses_its_record():
    gate.clear()
    entered.clear()
    with registry.register_temporarily(gated):
        handle = workflows.start("gated", None, id="stopped")
        results = []
        worker = threading.Thread(
            target=lambda: results.append(execution.run("stopped"))
        )
        worker.start()
        try:
            assert entered.wait(30)
            assert handle.cancel() is True
            # Cancelled at once, though the worker still holds it.
            assert handle.status == "cancelled"
            assert row("stopped").lease_token != ""
        finally:
            gate.set()
            worker.join(30)
        # The step finished, its record was refused; the same worker then
        # carried the cancel out.
        assert results == ["cancelled"]
        assert handle.snapshot().state == "cancelled"
        assert handle.history() == []
        assert row("stopped").retry_count == 0


def test_an_expired_lease_is_taken_over_and_the_run_resumes_by_replay(
    clock, monkeypatch
):
    handle = workflows.start("rowWriter", {"steps": 6}, id="crashy")
    original = DjangoDriver.run_transactional
    calls = {"n": 0}

    async def dies_in_the_third_transactional_step(self, fn, make_writes):
        calls["n"] += 1
        if calls["n"] == 3:

            def crash(output):
                raise Crash()  # after fn wrote its row, before the commit

            return await original(self, fn, crash)
        return await original(self, fn, make_writes)

    monkeypatch.setattr(
        DjangoDriver, "run_transactional", dies_in_the_third_transactional_step
    )
    with pytest.raises(Crash):
        execution.run("crashy")
    monkeypatch.setattr(DjangoDriver, "run_transactional", original)
    # The process is gone: its lease stays until it expires.
    assert row("crashy").status == WorkflowStatus.RUNNING
    assert run_due() == 0
    clock.advance(leases.lease_seconds() + 1)
    assert run_due() == 1
    assert handle.status == "completed"
    counts = rows_per_step("crashy")
    # s4 rolled back with its history entry and ran again: once in effect.
    assert {s: counts[s] for s in ("s0", "s2", "s4")} == {"s0": 1, "s2": 1, "s4": 1}
    assert all(counts[s] >= 1 for s in ("s1", "s3", "s5"))
    assert row("crashy").run_count == 2


def test_a_crash_after_a_non_transactional_step_reruns_it(clock, monkeypatch):
    handle = workflows.start("rowWriter", {"steps": 2}, id="again")
    original = DjangoDriver.batch

    async def dies_when_recording_s1(self, writes):
        if any(b"s1" in value for _, value in writes):
            raise Crash()
        return await original(self, writes)

    monkeypatch.setattr(DjangoDriver, "batch", dies_when_recording_s1)
    with pytest.raises(Crash):
        execution.run("again")
    monkeypatch.setattr(DjangoDriver, "batch", original)
    clock.advance(leases.lease_seconds() + 1)
    run_due()
    assert handle.status == "completed"
    assert rows_per_step("again") == {"s0": 1, "s1": 2}  # at-least-once


def test_the_heartbeat_reports_a_lost_lease():
    Workflow.objects.create(id="beat", name="greet", wake_at=None, status="pending")
    Workflow.objects.filter(pk="beat").update(wake_at=Workflow.objects.get().created_at)
    lease = leases.claim("beat")
    lost = threading.Event()
    with override_settings(RIVET={"WORKFLOW_LEASE_SECONDS": 0.3}):
        heartbeat = leases.Heartbeat(lease, on_lost=lost.set)
        heartbeat.start()
        try:
            Workflow.objects.filter(pk="beat").update(lease_token="someone-else")
            assert lost.wait(10)
        finally:
            heartbeat.stop()


def test_the_heartbeat_keeps_a_long_step_leased():
    gate.clear()
    entered.clear()
    with (
        registry.register_temporarily(gated),
        override_settings(RIVET={"WORKFLOW_LEASE_SECONDS": 0.6}),
    ):
        workflows.start("gated", None, id="long")
        results = []
        worker = threading.Thread(target=lambda: results.append(execution.run("long")))
        worker.start()
        try:
            assert entered.wait(30)
            # Many lease lengths pass while the step runs; nobody takes over.
            stop = threading.Event()
            for _ in range(15):
                assert leases.claim("long") is None
                stop.wait(0.1)
        finally:
            gate.set()
            worker.join(30)
        assert results == ["completed"]


# -- time: sleeps, backoffs, retries ---------------------------------------------------
def test_sleeps_wake_on_the_virtual_clock_through_run_due(clock, sent):
    handle = workflows.start("napper", {"seconds": 60}, id="nap")
    assert run_due() == 1
    assert handle.status == "sleeping"
    assert row("nap").wake_at == clock.datetime() + timedelta(seconds=60)
    # The wake-up is within the ETA horizon: a Celery ETA task was sent.
    assert ("nap", clock.now() + 60) in sent
    clock.advance(59)
    assert run_due() == 0
    clock.advance(1)
    assert run_due() == 1
    assert handle.result() == "rested"


def test_step_retries_back_off_on_the_virtual_clock(clock):
    handle = workflows.start("flaky", {"fail": 2, "base": 1.0}, id="flaky")
    start = clock.now()
    assert run_due() == 1  # attempt 1 fails: retry after 1 * 2**1 s
    assert row("flaky").wake_at.timestamp() == pytest.approx(start + 2)
    clock.advance(1.9)
    assert run_due() == 0
    clock.advance(0.1)
    assert run_due() == 1  # attempt 2 fails: retry after 1 * 2**2 s
    assert row("flaky").wake_at.timestamp() == pytest.approx(start + 6)
    clock.advance(4)
    assert run_due() == 1
    assert handle.result() == 3
    assert rows_per_step("flaky") == {"attempt": 3}


def test_a_storage_outage_is_retried_with_backoff(clock, monkeypatch):
    handle = workflows.start("greet", {"name": "ann"}, id="outage")
    original = DjangoDriver._upsert

    def broken(self, writes, removing=(), connection=None):
        raise OperationalError("database is locked")

    monkeypatch.setattr(DjangoDriver, "_upsert", broken)
    assert run_due() == 1
    outage = row("outage")
    assert outage.status == WorkflowStatus.SLEEPING
    assert outage.retry_count == 1 and "database is locked" in outage.last_error
    assert outage.wake_at.timestamp() == pytest.approx(clock.now() + 1)
    monkeypatch.setattr(DjangoDriver, "_upsert", original)
    clock.advance(1)
    assert run_due() == 1
    assert handle.result() == "hello ann"
    assert (row("outage").retry_count, row("outage").last_error) == (0, "")


def test_a_workflow_this_worker_does_not_know_is_retried_not_failed(clock):
    Workflow.objects.create(id="alien", name="fromNewerCode", wake_at=clock.datetime())
    assert run_due() == 1
    alien = row("alien")
    assert alien.status == WorkflowStatus.SLEEPING
    assert "fromNewerCode" in alien.last_error
    assert alien.wake_at.timestamp() == pytest.approx(clock.now() + 1)


@workflow(name="stubbornRefund")
async def stubborn_refund(ctx, input):
    await ctx.rollback_checkpoint("start")

    def refund(rollback_ctx, output):
        if not StepRow.objects.filter(step="refund-ok").exists():
            raise RuntimeError("payment provider down")
        StepRow.objects.create(workflow_id=ctx.workflow_id, step="refunded")

    await ctx.step("charge", lambda: "ch_1", rollback=refund)
    if input == "wait":  # for a cancel
        await ctx.sleep("wait", 3600)
    raise RuntimeError("out of stock")


def test_a_failing_rollback_handler_is_retried_with_backoff(clock):
    with registry.register_temporarily(stubborn_refund):
        handle = workflows.start("stubbornRefund", None, id="stubborn")
        assert run_due() == 1
        assert handle.status == "rolling_back"
        assert row("stubborn").wake_at.timestamp() == pytest.approx(clock.now() + 1)
        clock.advance(1)
        assert run_due() == 1
        assert row("stubborn").retry_count == 2
        StepRow.objects.create(workflow_id="x", step="refund-ok")
        clock.advance(2)
        assert run_due() == 1
        assert handle.status == "failed"
        assert rows_per_step("stubborn") == {"refunded": 1}


def test_a_cancel_whose_rollback_fails_stays_cancelled_and_retries_it(clock):
    with registry.register_temporarily(stubborn_refund):
        handle = workflows.start("stubbornRefund", "wait", id="stubborn-cancel")
        assert run_due() == 1 and handle.status == "sleeping"
        assert handle.cancel() is True  # its rollback raises, here
        found = row("stubborn-cancel")
        assert (found.status, found.cancel_requested, found.retry_count) == (
            "cancelled",
            True,
            1,
        )
        assert found.wake_at.timestamp() == pytest.approx(clock.now() + 1)
        assert "payment provider down" in found.last_error
        with pytest.raises(WorkflowCancelled):
            handle.result(timeout=5)
        clock.advance(1)
        assert run_due() == 1  # retried: still down
        assert row("stubborn-cancel").retry_count == 2
        StepRow.objects.create(workflow_id="x", step="refund-ok")
        clock.advance(2)
        assert run_due() == 1
        found = row("stubborn-cancel")
        assert (found.status, found.cancel_requested, found.retry_count) == (
            "cancelled",
            False,
            0,
        )
        assert rows_per_step("stubborn-cancel") == {"refunded": 1}
        assert handle.resume() is False  # its cancel ran a rollback handler


# -- wake-ups: nothing that arrives mid-run is lost ------------------------------------
def test_a_message_sent_while_the_workflow_runs_wakes_it_after_the_run(clock):
    handle = workflows.start("approval", {}, id="mid-run")
    lease = leases.claim("mid-run")  # a run is in progress...
    handle.send("approve", {"by": "ann"})  # ...and has not waited yet
    assert row("mid-run").wake_at is not None  # untouched by send
    # The run pauses waiting for "approve", unaware of the new message.
    leases.release(
        lease, status=WorkflowStatus.SLEEPING, wake_at=None, waiting_for=["approve"]
    )
    assert row("mid-run").wake_at == clock.datetime()  # the release saw the signal
    assert run_until_idle(handle) == "completed"


def test_a_long_sleep_gets_its_celery_task_from_the_sweeper(clock, sent):
    workflows.start("napper", {"seconds": 3600}, id="long-nap")
    sent.clear()
    assert run_due() == 1
    assert sent == []  # beyond the ETA horizon: no task yet
    assert sweep()["workflows"] == 0
    clock.advance(3600 - 600)
    assert sweep()["workflows"] == 1
    assert sent == [("long-nap", clock.now() + 600)]
    assert sweep()["workflows"] == 0  # sent once


def test_the_sweeper_resends_lost_tasks_and_expired_leases(clock, sent):
    workflows.start("greet", {"name": "a"}, id="lost")
    workflows.start("greet", {"name": "b"}, id="crashed")
    leases.claim("crashed")
    assert sweep()["workflows"] == 0  # the start's task is on its way
    clock.advance(leases.lease_seconds() + 1)
    assert sweep()["workflows"] == 1  # the crashed run, as soon as it expires
    assert sent[-1][0] == "crashed"
    assert sweep()["workflows"] == 0
    # "lost" has been due for a while, but its task may just be queued behind
    # others: it is re-sent once a minute.
    clock.advance(60 - leases.lease_seconds())
    assert sweep()["workflows"] == 1
    assert sent[-1][0] == "lost"
    assert sweep()["workflows"] == 0
    assert run_due() == 2


def test_a_cancel_whose_worker_crashed_is_carried_out_once_its_lease_expires(
    clock, sent
):
    with registry.register_temporarily(stubborn_refund):
        StepRow.objects.create(workflow_id="x", step="refund-ok")
        handle = workflows.start("stubbornRefund", "wait", id="orphan")
        assert run_due() == 1  # charged, then sleeping
        handle.wake()
        leases.claim("orphan")  # a worker takes it, and dies holding it
        assert handle.cancel() is True
        assert handle.status == "cancelled" and row("orphan").cancel_requested
        sent.clear()
        clock.advance(leases.lease_seconds() + 1)
        assert sweep()["workflows"] == 1  # the crashed holder's cancel
        assert sent[-1][0] == "orphan"
        assert run_due() == 1
    found = row("orphan")
    assert (found.status, found.cancel_requested) == ("cancelled", False)
    assert rows_per_step("orphan") == {"refunded": 1}


def test_sent_tasks_are_recorded_on_the_row(clock, sent):
    workflows.start("greet", {"name": "a"}, id="task")
    assert sent == [("task", clock.now())]
    assert row("task").enqueued_for == clock.datetime()


def test_without_celery_the_worker_is_notified_instead(clock, monkeypatch):
    from django_rivet import dispatch

    notified = []
    monkeypatch.setattr(dispatch, "notify_worker", lambda: notified.append(1))
    with override_settings(RIVET={"EMBEDDED_WORKER": True}):
        assert dispatch.backend().eta_tasks is False
        workflows.start("greet", {"name": "a"}, id="embedded")
        assert notified
        assert row("embedded").enqueued_for is None


# -- the in-process worker -------------------------------------------------------------
def test_the_worker_loop_runs_due_workflows(clock):
    assert "workflows" in [work.name for work in due_work()]
    handle = workflows.start("napper", {"seconds": 30})
    worker = Worker(sweep_interval=3600)
    assert worker.run_once() >= 1
    from django_rivet.upkeep.worker import next_due_at

    assert next_due_at() == pytest.approx(clock.now() + 30)
    clock.advance(30)
    worker.run_once()
    assert handle.status == "completed"


def test_rivet_worker_once_drives_workflows(clock):
    from io import StringIO

    from django.core.management import call_command

    handle = workflows.start("greet", {"name": "ann"})
    out = StringIO()
    call_command("rivet_worker", "--once", stdout=out)
    assert handle.status == "completed"


# -- flushes ---------------------------------------------------------------------------
def _flush_many(driver: DjangoDriver, count: int) -> None:
    async def flush():
        storage = await Storage.load(driver)
        for index in range(count):
            storage.create_entry((storage.register_name(f"n{index}"),), "step", {})
        await storage.flush()

    async_to_sync(flush)()


def _count_batches(monkeypatch):
    sizes = []
    original = DjangoDriver.batch

    async def counting(self, writes):
        sizes.append(len(writes))
        return await original(self, writes)

    monkeypatch.setattr(DjangoDriver, "batch", counting)
    return sizes


def test_by_default_a_flush_is_written_in_chunks(clock, monkeypatch):
    Workflow.objects.create(id="chunks", name="greet")
    sizes = _count_batches(monkeypatch)
    # 200 names and 200 entries (each holding its metadata): more than one
    # batch, so the names are the registry's rows, in the first batches.
    _flush_many(DjangoDriver("chunks"), 200)
    assert sum(sizes) == 400 and max(sizes) <= MAX_KV_BATCH_ENTRIES
    assert len(sizes) == 4


def test_kv_atomic_flush_writes_a_flush_in_one_transaction(clock, monkeypatch):
    Workflow.objects.create(id="atomic", name="greet")
    sizes = _count_batches(monkeypatch)
    units = []
    original = DjangoDriver.atomic_flush

    async def counting(self, writes, deletions):
        units.append(len(writes))
        return await original(self, writes, deletions)

    monkeypatch.setattr(DjangoDriver, "atomic_flush", counting)
    with override_settings(RIVET={"KV_ATOMIC_FLUSH": True}):
        driver = DjangoDriver("atomic")
        _flush_many(driver, 100)
    # One unit: each entry one record, the first bringing the 100 names.
    assert units == [100] and sizes == []
    assert len(async_to_sync(driver.list)(b"")) == 100


def test_kv_atomic_flush_runs_workflows_end_to_end(clock):
    with override_settings(RIVET={"KV_ATOMIC_FLUSH": True}):
        handle = workflows.start("rowWriter", {"steps": 4})
        assert run_until_idle(handle) == "completed"
    assert StepRow.objects.count() == 4
