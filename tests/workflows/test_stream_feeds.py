"""One feed per stream per process: what a hundred readers of one stream cost.

The readers are :class:`StreamReader` objects on the test's loop, as the SSE
route uses them; the commits are a real workflow's, announced as they are in
production (this process's listeners, and the channel layer).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from django.test import override_settings

from django_rivet import events, workflows
from django_rivet.engine import schema, workflow
from django_rivet.testing import arun_until_idle, register_temporarily
from django_rivet.workflows import streams
from django_rivet.workflows.stream_feeds import StreamReader

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

READERS = 100
IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


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


async def test_a_reader_takes_about_max_bytes_at_a_time_and_at_least_one_value():
    handle = await workflows.astart(
        "streamer", {"count": 5, "pad": 1000, "hold": True}, id="bounded"
    )
    assert await arun_until_idle(handle) == "sleeping"  # five values of ~1 KB
    for max_bytes, expected in ((2500, [3, 2]), (10, [1] * 5), (0, [5])):
        reader = StreamReader("bounded", "n")
        try:
            sizes = []
            while found := await reader.next(wait=0, max_bytes=max_bytes):
                sizes.append(len(found))
            assert sizes == expected
        finally:
            reader.close()
    await handle.asend("release")
    assert await arun_until_idle(handle) == "completed"


def wait_blocking(condition, seconds=10.0):
    """Wait for ``condition()`` without letting the event loop run."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.005)


async def test_announcements_leave_the_layer_while_the_readers_loop_is_busy(
    row_reads,
):
    # Another process's commits reach this one only through the layer. The
    # loop serving the readers is busy (here: blocked), as a loop handing a
    # commit's values to a hundred responses is: the announcements must not
    # wait in the layer for it, but be taken and handed over in its next turn.
    with register_temporarily(rounds), override_settings(CHANNEL_LAYERS=IN_MEMORY):
        handle = await workflows.astart(
            "stream-rounds", {"rounds": 0, "size": 0}, id="aside"
        )
        readers = await open_readers("aside", 3)
        hub = readers[0].hub
        layer = events.get_layer()
        group = events.workflow_group("aside")
        while hub.channel not in layer.groups.get(group, {}):
            await asyncio.sleep(0.001)  # the hub joins the workflow's group
        row_reads.clear()
        for first in (1, 3, 5):  # three commits of two values each
            events.send_to_group(group, announcement(first))
        wait_blocking(lambda: len(hub._inbox) == 3)
        waiting = layer.channels.get(hub.channel)
        assert waiting is None or waiting.empty()  # nothing waits in the layer
        try:
            await asyncio.sleep(0)  # one turn of the loop takes all three
            for reader in readers:
                found = await reader.next(wait=0)
                assert [v.decoded() for v in found] == ["a", "b", "c", "d", "e", "f"]
            assert row_reads == []
        finally:
            for reader in readers:
                reader.close()
        assert await arun_until_idle(handle) == "completed"


def announcement(first):
    """The channel-layer message of a commit of two values from ``first``."""
    values = [schema.dumps("abcdef"[first - 1]), schema.dumps("abcdef"[first])]
    return {
        "type": streams.STREAM_MESSAGE,
        "workflow": "aside",
        "ended": False,
        "streams": [["n", first, values, first + 1, False]],
    }
