"""Children started on a workflow queue, and ``ctx.wait_first`` (issue 44).

The tests named after DBOS Transact's (tests/test_queue.py, test_dbos.py)
are translations of them: DBOS's ``enqueue_workflow`` inside a workflow is
``ctx.start_child(..., queue=...)`` here, and ``DBOS.wait_first(handles)``
is ``ctx.wait_first(name, ids)``.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_rivet import WorkflowDeduplicated, workflows
from django_rivet.models import Workflow
from django_rivet.testing import (
    freeze_time,
    register_temporarily,
    run_due,
    run_until_idle,
)
from django_rivet.workflows import workflow
from tests.support.clock import START

# pg: the PostgreSQL leg runs this module (children admitted through their
# queue after the parent's fenced write commits, waits on several names).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

settings = override_settings(
    RIVET={"WORKFLOW_QUEUES": {"children": {"concurrency": 3}, "wide": {}}}
)


@workflow(name="fanOut")
async def fan_out(ctx, input):
    """Enqueues ``count`` approval children, then takes them as they end."""
    ids = []
    for index in range(input["count"]):
        ids.append(
            await ctx.start_child(f"task-{index}", "approval", {}, queue=input["queue"])
        )
    results = []
    remaining = list(ids)
    for round_index in range(len(ids)):
        first = await ctx.wait_first(f"first-{round_index}", remaining)
        results.append([first.child_id, first.state, first.output])
        remaining.remove(first.child_id)
    return results


def statuses(*ids):
    found = dict(Workflow.objects.filter(pk__in=ids).values_list("pk", "status"))
    return [found[pk] for pk in ids]


def approve(workflow_id, by):
    workflows.get(workflow_id).send("approve", {"by": by})
    run_due()


@settings
def test_queue_childwf():
    """DBOS test_queue_childwf: children go through their queue's limit."""
    with register_temporarily(fan_out), freeze_time(START):
        parent = workflows.start("fanOut", {"count": 4, "queue": "children"}, id="p")
        run_due()
        kids = [f"p/task-{index}" for index in range(4)]
        assert statuses(*kids) == ["sleeping"] * 3 + ["queued"]
        assert Workflow.objects.get(pk="p/task-3").parent_id == "p"
        for index, kid in enumerate(kids):
            approve(kid, f"user-{index}")
        assert parent.status == "completed"
    assert [child for child, _, _ in parent.result()] == kids


@settings
def test_wait_first_queue():
    """DBOS test_wait_first_queue: taken in the order they end, recorded."""
    with register_temporarily(fan_out), freeze_time(START) as clock:
        parent = workflows.start("fanOut", {"count": 5, "queue": "wide"}, id="wq")
        run_due()
        for index in reversed(range(5)):  # they end in reverse order
            clock.advance(1)
            approve(f"wq/task-{index}", f"user-{index}")
    assert parent.result() == [
        [f"wq/task-{index}", "completed", {"approved_by": f"user-{index}"}]
        for index in reversed(range(5))
    ]
    kinds = [entry.kind for entry in parent.history()]
    assert kinds == ["child"] * 5 + ["wait_first"] * 5


@workflow(name="firstOfTwo")
async def first_of_two(ctx, input):
    first = await ctx.wait_first("first", input["ids"])
    await ctx.sleep("then", 60)  # the next run replays the wait
    return [first.child_id, first.state, first.output]


def test_wait_first():
    """DBOS test_wait_first: workflows it did not start, the finished one wins.

    And a replay returns the recorded one, though the other ended since.
    """
    with register_temporarily(first_of_two), freeze_time(START) as clock:
        fast = workflows.start("greet", {"name": "fast"}, id="fast")
        slow = workflows.start("approval", {}, id="slow")
        run_until_idle(fast)
        run_until_idle(slow)
        waiter = workflows.start("firstOfTwo", {"ids": ["slow", "fast"]}, id="w")
        assert run_until_idle(waiter) == "sleeping"
        slow.send("approve", {"by": "late"})
        run_until_idle(slow)
        clock.advance(60)
        assert run_until_idle(waiter) == "completed"
    assert waiter.result() == ["fast", "completed", "hello fast"]


def test_wait_first_wakes_for_a_workflow_it_did_not_start():
    with register_temporarily(first_of_two), freeze_time(START) as clock:
        one = workflows.start("approval", {}, id="one")
        two = workflows.start("approval", {}, id="two")
        run_until_idle(one)
        run_until_idle(two)
        waiter = workflows.start("firstOfTwo", {"ids": ["one", "two"]}, id="w2")
        assert run_until_idle(waiter) == "sleeping"
        assert Workflow.objects.get(pk="w2").waiting_for == ["child:one", "child:two"]
        assert Workflow.objects.get(pk="two").awaited_by == ["w2"]
        two.cancel()  # a cancel is an end too: it is returned, not raised
        run_until_idle(waiter)
        clock.advance(60)
        assert run_until_idle(waiter) == "completed"
    child_id, state, _ = waiter.result()
    assert (child_id, state) == ("two", "cancelled")


def test_a_workflow_ending_wakes_its_waiters_from_what_its_release_read():
    """The release that records the end reads the waiters in its own write.

    The waiter is due at once (no clock moved), and no statement of the
    release reads the row again for ``awaited_by``.
    """
    with register_temporarily(first_of_two), freeze_time(START) as clock:
        one = workflows.start("approval", {}, id="one")
        two = workflows.start("approval", {}, id="two")
        run_until_idle(one)
        run_until_idle(two)
        waiter = workflows.start("firstOfTwo", {"ids": ["one", "two"]}, id="w3")
        assert run_until_idle(waiter) == "sleeping"
        two.send("approve", {"by": "me"})
        with CaptureQueriesContext(connection) as queries:
            assert run_until_idle(two) == "completed"
        rereads = [
            query["sql"]
            for query in queries.captured_queries
            if "awaited_by" in query["sql"] and "RETURNING" not in query["sql"]
        ]
        assert rereads == []
        waiting = Workflow.objects.get(pk="w3")
        assert waiting.wake_at is not None and waiting.wake_at <= START
        assert run_until_idle(waiter) == "sleeping"  # its sleep after the wait
        clock.advance(60)
        assert run_until_idle(waiter) == "completed"
    child_id, state, output = waiter.result()
    assert (child_id, state, output) == ("two", "completed", {"approved_by": "me"})


@workflow(name="firstOfNone")
async def first_of_none(ctx, input):
    try:
        await ctx.wait_first("first", input["ids"])
    except ValueError as error:
        return str(error)


def test_wait_first_empty():
    """DBOS test_wait_first_empty: no ids (or the same id twice) is refused."""
    with register_temporarily(first_of_none):
        for ids in ([], ["a", "a"]):
            handle = workflows.start("firstOfNone", {"ids": ids})
            assert run_until_idle(handle) == "completed"
            assert "one or more distinct workflow ids" in handle.result()


@workflow(name="dedupedChildren")
async def deduped_children(ctx, input):
    await ctx.start_child("one", "approval", {}, queue="children", dedup_key="k")
    try:
        await ctx.start_child("two", "approval", {}, queue="children", dedup_key="k")
    except WorkflowDeduplicated as error:
        return error.workflow_id


@settings
def test_a_child_s_dedup_key_is_its_queue_s():
    with register_temporarily(deduped_children):
        handle = workflows.start("dedupedChildren", {}, id="dd")
        assert run_until_idle(handle) == "completed"
    assert handle.result() == "dd/one"
    assert not Workflow.objects.filter(pk="dd/two").exists()
