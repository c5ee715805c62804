"""Debounced starts (issue 44): start(..., dedup_key=k, debounce=s, debounce_max=).

The tests named after DBOS Transact's (tests/test_debouncer.py) are
translations of them, under the virtual clock: ``run_due`` admits what is
due and runs it. DBOS's ``Debouncer.create(workflow).debounce(key, period,
input)`` is ``workflows.start(workflow, input, queue=q, dedup_key=key,
debounce=period)`` here; its ``debounce_timeout_sec`` is ``debounce_max``.

Deliberate differences from DBOS, explained in docs/workflows.md
("Debounced starts"):

* A queue is required: a burst is the starts of one ``dedup_key`` on one
  queue (the queue's deduplication index decides races). DBOS keys by
  workflow name + key on an internal queue; here a key held by a workflow
  of another name is ``workflow/duplicate``.
* Debouncing from workflow code is not offered (``ctx.start_child`` takes
  no ``debounce``), so DBOS's in-workflow tests (replay, checkpoint
  atomicity, parent deadlines) have no counterpart; nor have its
  application-name and portable-serialization tests.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test import override_settings

from django_rivet import WorkflowDeduplicated, workflows
from django_rivet.models import Workflow
from django_rivet.testing import freeze_time, run_due, run_until_idle
from django_rivet.workflows import InvalidQueueArguments
from tests.support.clock import START

# pg: the PostgreSQL leg runs this module (the bounce's conditional update,
# the deduplication index, admission clearing the key in raw SQL).
pytestmark = [pytest.mark.pg, pytest.mark.django_db]

QUEUES = {
    "q": {},
    "parts": {"partition_concurrency": 1},
}
settings = override_settings(RIVET={"WORKFLOW_QUEUES": QUEUES})


def bounce(name, key="key", period=2.0, **options):
    """One start of a debounced burst of "greet" (the result names the input)."""
    options.setdefault("queue", "q")
    return workflows.start(
        "greet", {"name": name}, dedup_key=key, debounce=period, **options
    )


def row(handle):
    return Workflow.objects.get(pk=handle.workflow_id)


@settings
def test_debouncer():
    """DBOS test_debouncer: one burst, one workflow, the latest input."""
    with freeze_time(START) as clock:
        first = bounce("first")
        clock.advance(1)
        second = bounce("second")
        assert first == second  # the same workflow id
        clock.advance(1.5)  # 2.5 s after the first start: not yet
        assert run_due() == 0
        clock.advance(0.5)  # 2 s after the last one
        assert run_due() == 2  # admitted, then run
        assert first.result(timeout=1) == "hello second"
        # It started: the next start of the key begins a new burst.
        third = bounce("third")
        fourth = bounce("fourth")
        assert third != first and third == fourth
        clock.advance(2)
        run_due()
        assert fourth.result(timeout=1) == "hello fourth"
        # An id of the caller's names the new burst's workflow.
        named = bounce("named", id="my-id")
        assert named.workflow_id == "my-id"
        clock.advance(2)
        run_due()
        assert named.result(timeout=1) == "hello named"


@settings
def test_debouncer_timeout():
    """DBOS test_debouncer_timeout: debounce_max bounds the wait; a shorter
    period shortens it."""
    with freeze_time(START) as clock:
        huge = 10_000_000
        first = bounce("first", period=huge, debounce_max=2)
        clock.advance(1)
        second = bounce("second", period=huge, debounce_max=2)
        assert first == second
        clock.advance(1)  # 2 s since the burst's first start
        run_due()
        assert second.result(timeout=1) == "hello second"
        third = bounce("third", period=huge, debounce_max=2)
        fourth = bounce("fourth", period=huge, debounce_max=timedelta(seconds=2))
        assert third != first and third == fourth
        clock.advance(2)
        run_due()
        assert fourth.result(timeout=1) == "hello fourth"
        # A long period then a short one: it starts after the short one.
        long = bounce("long", period=huge)
        short = bounce("short", period=1)
        assert long == short and long != fourth
        clock.advance(1)
        run_due()
        assert long.result(timeout=1) == "hello short"


@settings
def test_multiple_debouncers():
    """DBOS test_multiple_debouncers: each key its own burst."""
    with freeze_time(START) as clock:
        one = bounce("first", key="key_one")
        one_again = bounce("second", key="key_one")
        two = bounce("third", key="key_two")
        two_again = bounce("fourth", key="key_two")
        assert one == one_again and two == two_again and one != two
        clock.advance(2)
        run_due()
        assert one.result(timeout=1) == "hello second"
        assert two.result(timeout=1) == "hello fourth"


@settings
def test_debouncer_queue():
    """DBOS test_debouncer_queue: the queue, a timeout and an id pass through;
    the timeout counts from when the burst's workflow is due to start."""
    with freeze_time(START) as clock:
        first = bounce("first")
        assert bounce("second") == first
        assert row(first).queue == "q"
        clock.advance(2)
        run_due()
        assert first.result(timeout=1) == "hello second"
        third = bounce("third", timeout=5.0)
        clock.advance(1)
        fourth = bounce("fourth", timeout=5.0)
        assert third == fourth
        found = row(third)
        assert found.run_after == START + timedelta(seconds=5)
        assert found.deadline_at == found.run_after + timedelta(seconds=5)
        clock.advance(2)
        run_due()
        assert fourth.result(timeout=1) == "hello fourth"
        named = bounce("named", id="wf-id", version="test_version")
        assert named.workflow_id == "wf-id" and named.version == "test_version"
        with override_settings(
            RIVET={"WORKFLOW_QUEUES": QUEUES, "APP_VERSION": "test_version"}
        ):
            clock.advance(2)
            run_due()
        assert named.result(timeout=1) == "hello named"


@settings
def test_debounce_on_a_partitioned_queue():
    """A partitioned queue debounces too (its admission clears the key)."""
    with freeze_time(START) as clock:
        first = bounce("first", queue="parts", partition_key="p")
        assert bounce("second", queue="parts", partition_key="p") == first
        clock.advance(2)
        run_due()
        assert first.result(timeout=1) == "hello second"
        assert bounce("next", queue="parts", partition_key="p") != first


@settings
@pytest.mark.django_db(transaction=True)  # a thread: its own connection
async def test_debouncer_async():
    """DBOS test_debouncer_async (and test_debouncer_client_async: this
    project's start is its client)."""
    with freeze_time(START) as clock:
        options = {"queue": "q", "dedup_key": "key", "debounce": 2}
        first = await workflows.astart("greet", {"name": "first"}, **options)
        second = await workflows.astart("greet", {"name": "second"}, **options)
        assert first == second
        clock.advance(2)
        await sync_to_async(run_due)()
        assert await first.aresult(timeout=1) == "hello second"
        third = await workflows.astart("greet", {"name": "third"}, **options)
        assert third != first


@settings
def test_debounce_flip_clears_dedup():
    """DBOS test_debounce_flip_clears_dedup: once started (not finished),
    the key is free and a same-key start begins a new burst."""
    with freeze_time(START) as clock:
        options = {"queue": "q", "dedup_key": "key", "debounce": 1_000_000}
        handle = workflows.start("approval", {}, **options)
        found = row(handle)
        assert (found.status, found.debounced, found.dedup_key) == (
            "queued",
            True,
            "key",
        )
        again = workflows.start("approval", {}, **{**options, "debounce": 1})
        assert again == handle
        clock.advance(1)
        run_due()
        found = row(handle)
        assert found.status == "sleeping"  # started: waits for its message
        assert found.dedup_key == ""
        third = workflows.start("approval", {}, **{**options, "debounce": 1})
        assert third != handle
        for each in (handle, third):
            clock.advance(1)
            run_due()
            each.send("approve", {"by": "ann"})
            assert run_until_idle(each) == "completed"


@settings
def test_debounce_cancel_then_redebounce():
    """DBOS test_debounce_cancel_then_redebounce: a cancelled burst frees its key."""
    with freeze_time(START) as clock:
        handle = bounce("first", period=1_000_000)
        assert handle.status == "queued"
        assert handle.cancel() is True
        again = bounce("second", period=1)
        assert again != handle
        clock.advance(1)
        run_due()
        assert again.result(timeout=1) == "hello second"


@settings
def test_debounce_deadline_caps_initial_delay():
    """DBOS test_debounce_deadline_caps_initial_delay."""
    with freeze_time(START):
        handle = bounce("first", period=1_000_000, debounce_max=1000)
        found = row(handle)
        assert found.status == "queued" and found.debounced
        assert found.debounce_deadline == START + timedelta(seconds=1000)
        assert found.run_after <= found.debounce_deadline
        handle.cancel()


@settings
def test_debounce_user_dedup_conflict_raises():
    """DBOS test_debounce_user_dedup_conflict_raises: a key held by a start
    that is not debounced is a conflict, not a takeover."""
    blocker = workflows.start("approval", {}, queue="q", dedup_key="key")
    with pytest.raises(WorkflowDeduplicated) as caught:
        bounce("second")
    assert caught.value.workflow_id == blocker.workflow_id
    # And the other way round: a plain start of a debounced burst's key.
    held = bounce("x", key="other")
    with pytest.raises(WorkflowDeduplicated):
        workflows.start("greet", {"name": "y"}, queue="q", dedup_key="other")
    # Difference: DBOS keys by workflow name + key; here by queue + key.
    with pytest.raises(WorkflowDeduplicated):
        workflows.start("approval", {}, queue="q", dedup_key="other", debounce=1)
    held.cancel()
    blocker.cancel()


@settings
def test_debounce_fixed_workflow_id_reuse():
    """DBOS test_debounce_fixed_workflow_id_reuse: the same id across the
    starts of one burst bounces it (last input wins)."""
    with freeze_time(START) as clock:
        first = bounce("1", id="wfid")
        second = bounce("2", id="wfid")
        assert first.workflow_id == second.workflow_id == "wfid"
        clock.advance(2)
        run_due()
        assert first.result(timeout=1) == "hello 2"
        third = bounce("3", key="key2", period=1_000_000, id="wfid2")
        fourth = bounce("4", key="key2", period=1, id="wfid2")
        assert third.workflow_id == fourth.workflow_id == "wfid2"
        clock.advance(1)
        run_due()
        assert fourth.result(timeout=1) == "hello 4"
        # The burst is over: its id is taken, so a start under it returns it
        # unchanged (idempotent per id, as any start) and bounces nothing.
        assert bounce("5", key="key3", id="wfid2") == fourth
        assert not Workflow.objects.filter(dedup_key="key3").exists()


@settings
def test_debounce_misuse_is_refused():
    """A debounced start needs a queue and a dedup_key; bad values are refused
    before anything is stored (workflow/invalid_queue_args, a ValueError)."""
    cases = [
        {"debounce": 1},
        {"debounce": 1, "queue": "q"},
        {"debounce": 1, "dedup_key": "k"},
        {"debounce": -1, "queue": "q", "dedup_key": "k"},
        {"debounce": float("nan"), "queue": "q", "dedup_key": "k"},
        {"debounce": "1", "queue": "q", "dedup_key": "k"},
        {"debounce_max": 5, "queue": "q", "dedup_key": "k"},
        {"debounce": 1, "debounce_max": -5, "queue": "q", "dedup_key": "k"},
        {"debounce": 1, "run_after": 5, "queue": "q", "dedup_key": "k"},
    ]
    for options in cases:
        with pytest.raises(InvalidQueueArguments) as caught:
            workflows.start("greet", {"name": "x"}, **options)
        assert isinstance(caught.value, ValueError)
        assert caught.value.code == "invalid_queue_args"
    assert not Workflow.objects.exists()


@settings
@pytest.mark.django_db(transaction=True)  # threads: each its own connection
def test_concurrent_starts_of_one_key_make_one_workflow():
    """Concurrent first starts race on the queue's deduplication index: the
    losers bounce the winner, and every caller gets its handle."""
    barrier = threading.Barrier(4)
    found, errors = [], []

    def start(n):
        try:
            barrier.wait(10)
            found.append(bounce(f"n{n}", period=60).workflow_id)
        except Exception as error:  # reported below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=start, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert len(found) == 4 and len(set(found)) == 1
    assert Workflow.objects.count() == 1
