"""Workflow streams on the database: read live, in order, never before commit.

On SQLite here and on PostgreSQL in the ``pg`` leg. Faults at every driver
call are the ``streams`` scenario of ``tests/workflows/test_faults.py``.
"""

from __future__ import annotations

import asyncio

import pytest

from django_rivet import workflows
from django_rivet.engine import workflow
from django_rivet.exceptions import WorkflowNotFound
from django_rivet.models import Workflow, WorkflowStream, WorkflowStreamValue
from django_rivet.testing import register_temporarily, run_until_idle
from django_rivet.workflows import streams as stream_rows
from django_rivet.workflows.client import WorkflowHandle
from tests.support.threads import run_in_background

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

COUNT = 1000


@workflow(name="stream-count")
async def count_up(ctx, input):
    for index in range(input["count"]):
        await ctx.write_stream("n", index)
        if index % 50 == 0:
            await asyncio.sleep(0.002)  # the workflow waits on something else
    await ctx.close_stream("n")
    return input["count"]


@workflow(name="stream-unclosed")
async def unclosed(ctx, input):
    await ctx.write_stream("s", "only")
    await ctx.sleep("nap", 0)
    return "done"


def test_a_thousand_values_are_read_complete_and_in_order_while_written():
    with register_temporarily(count_up):
        handle = workflows.start("stream-count", {"count": COUNT}, id="s-1000")
        thread = run_in_background("s-1000")
        try:
            got = list(handle.read_stream("n"))
        finally:
            thread.join(30)
        assert got == list(range(COUNT))
        assert handle.result() == COUNT
        # Later readers resume anywhere, and a closed stream ends at once.
        assert list(handle.read_stream("n", since=COUNT - 3)) == [997, 998, 999]
        assert list(handle.read_stream("n", since=COUNT)) == []
        row = WorkflowStream.objects.get(workflow_id="s-1000", key="n")
        assert (row.length, row.closed) == (COUNT, True)


async def test_async_readers_share_a_stream_from_their_own_offsets():
    with register_temporarily(count_up):
        handle = await workflows.astart("stream-count", {"count": 300}, id="s-a")

        async def read(since):
            return [value async for value in handle.aread_stream("n", since=since)]

        readers = [asyncio.ensure_future(read(since)) for since in (0, 0, 150)]
        await asyncio.sleep(0.05)
        thread = run_in_background("s-a")
        try:
            first, second, late = await asyncio.wait_for(asyncio.gather(*readers), 30)
        finally:
            thread.join(30)
        assert first == second == list(range(300))
        assert late == list(range(150, 300))


def test_a_stream_ends_with_its_workflow_even_unclosed():
    with register_temporarily(unclosed):
        handle = workflows.start("stream-unclosed", None, id="s-open")
        run_until_idle(handle)
        assert handle.status == "completed"
        assert list(handle.read_stream("s")) == ["only"]
        assert list(handle.read_stream("never-written")) == []


def test_reading_a_missing_workflow_is_not_found():
    with pytest.raises(WorkflowNotFound):
        list(WorkflowHandle("nope", "stream-count").read_stream("s"))


def test_a_failed_commit_shows_nothing(monkeypatch):
    announced = []
    monkeypatch.setattr(
        stream_rows, "announce", lambda *args, **kw: announced.append(args)
    )
    real = stream_rows.append_rows

    def append_then_fail(workflow_id, writes):
        real(workflow_id, writes)  # the rows are written, then the commit fails
        assert WorkflowStreamValue.objects.filter(stream__workflow_id=workflow_id)
        raise OSError("the disk is full")

    monkeypatch.setattr(stream_rows, "append_rows", append_then_fail)
    with register_temporarily(count_up):
        handle = workflows.start("stream-count", {"count": 5}, id="s-fail")
        assert run_until_idle(handle) == "sleeping"  # retried later
    assert not WorkflowStreamValue.objects.filter(stream__workflow_id="s-fail")
    assert stream_rows.contents("s-fail") == {}
    assert announced == []
    # The retry after the backoff writes them, once.
    monkeypatch.setattr(stream_rows, "append_rows", real)
    Workflow.objects.filter(pk="s-fail").update(
        wake_at=Workflow.objects.get(pk="s-fail").created_at
    )
    with register_temporarily(count_up):
        assert run_until_idle(handle) == "completed"
    assert stream_rows.contents("s-fail") == {"n": ([0, 1, 2, 3, 4], True)}
