"""One feed per stream per process: what a hundred readers of one stream cost.

The readers are :class:`StreamReader` objects on the test's loop, as the SSE
route uses them; the commits are a real workflow's, announced as they are in
production (this process's listeners, and the channel layer).
"""

from __future__ import annotations

import asyncio

import pytest

from django_rivet import workflows
from django_rivet.engine import workflow
from django_rivet.testing import arun_until_idle, register_temporarily
from django_rivet.workflows import streams
from django_rivet.workflows.stream_feeds import StreamReader

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

READERS = 100


@workflow(name="stream-rounds")
async def rounds(ctx, input):
    """Write ``size`` values per round, each round after a ``go`` message."""
    for turn in range(input["rounds"]):
        await ctx.messages.next(f"go-{turn}", names=["go"])
        for index in range(input["size"]):
            await ctx.write_stream("n", turn * input["size"] + index)
    await ctx.close_stream("n")
    return input["rounds"]


@pytest.fixture
def row_reads(monkeypatch):
    """Count the reads of stream rows (``streams.read_after``)."""
    calls = []
    read_after = streams.read_after

    def counted(*args, **kwargs):
        calls.append(args)
        return read_after(*args, **kwargs)

    monkeypatch.setattr(streams, "read_after", counted)
    return calls


async def open_readers(workflow_id, count):
    """Open ``count`` readers; each reads the rows once as it opens."""
    readers = [StreamReader(workflow_id, "n") for _ in range(count)]
    assert await asyncio.gather(*(r.next(wait=0) for r in readers)) == [[]] * count
    return readers


async def test_a_hundred_readers_share_each_commit_without_reading_the_rows(
    row_reads,
):
    with register_temporarily(rounds):
        handle = await workflows.astart(
            "stream-rounds", {"rounds": 3, "size": 10}, id="fan-out"
        )
        assert await arun_until_idle(handle) == "sleeping"
        readers = await open_readers("fan-out", READERS)
        assert len(row_reads) == READERS
        try:
            for turn in range(3):
                row_reads.clear()
                await handle.asend("go")
                await arun_until_idle(handle)
                found = await asyncio.gather(*(r.next(wait=5) for r in readers))
                expected = list(range(turn * 10, turn * 10 + 10))
                assert [v.decoded() for v in found[0]] == expected
                # One object for every reader: what the transport makes of
                # it (the SSE messages, joined) is made once, not 100 times.
                assert all(values is found[0] for values in found)
                # The announcement carried the values: no reader read rows.
                assert row_reads == []
        finally:
            for reader in readers:
                reader.close()
