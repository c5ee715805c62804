"""ctx.write_stream and ctx.close_stream: values in order, once from the body.

Faults at every driver call (a failed commit, a crash before or after it)
are covered by the ``streams`` scenario of ``faults.py``; here, the rules.
"""

from __future__ import annotations

import pytest

from django_rivet.engine import (
    InMemoryDriver,
    Loop,
    StepOutputError,
    check_replay,
    run_workflow,
)
from django_rivet.engine.cbor import loads
from django_rivet.engine.stream_buffer import FLUSH_VALUES

from .helpers import run_to_end


class CountingDriver(InMemoryDriver):
    def __init__(self) -> None:
        super().__init__()
        self.appends: list[int] = []

    async def append_streams(self, writes):
        self.appends.append(len(writes))
        await super().append_streams(writes)


def values(driver: InMemoryDriver, key: str) -> list:
    return [loads(v) for _, v in driver.streams.read(key)]


async def test_body_writes_land_once_in_order_across_replays(clock, mode):
    driver = CountingDriver()

    async def wf(ctx, _):
        for word in ("durable", "work"):
            await ctx.write_stream("words", word)
        await ctx.sleep("nap", 30)
        await ctx.write_stream("words", "speaks")
        await ctx.close_stream("words")
        return "ok"

    outcome = await run_to_end(clock, "wf-1", wf, driver, mode)
    assert outcome.output == "ok"
    assert values(driver, "words") == ["durable", "work", "speaks"]
    assert driver.streams.closed("words")
    # A finished workflow replayed from the start appends nothing again.
    again = await run_workflow("wf-1", wf, None, driver)
    assert again.state == "completed"
    assert values(driver, "words") == ["durable", "work", "speaks"]


async def test_writes_are_grouped_into_few_commits(clock):
    driver = CountingDriver()

    async def wf(ctx, _):
        for index in range(FLUSH_VALUES * 3 + 5):
            await ctx.write_stream("n", index)

    await run_workflow("wf-1", wf, None, driver)
    assert values(driver, "n") == list(range(FLUSH_VALUES * 3 + 5))
    assert sum(driver.appends) == FLUSH_VALUES * 3 + 5
    assert len(driver.appends) <= 5


async def test_loop_iterations_write_once_with_pruned_history(clock):
    driver = InMemoryDriver()

    async def body(ctx, state):
        await ctx.write_stream("ticks", state)
        await ctx.sleep("tick", 1)
        return Loop.break_(state) if state == 6 else Loop.continue_(state + 1)

    async def wf(ctx, _):
        return await ctx.loop("count", body, state=0, history_prune_interval=2)

    outcome = await run_to_end(clock, "wf-1", wf, driver, "yield")
    assert outcome.output == 6
    assert values(driver, "ticks") == list(range(7))


async def test_step_writes_come_again_when_the_step_is_retried(clock):
    driver = InMemoryDriver()
    attempts = []

    async def wf(ctx, _):
        async def fetch():
            attempts.append(1)
            await ctx.write_stream("tokens", f"try{len(attempts)}")
            if len(attempts) == 1:
                raise RuntimeError("flaky")
            return len(attempts)

        return await ctx.step("fetch", fetch, retry_backoff_base=1)

    outcome = await run_to_end(clock, "wf-1", wf, driver, "yield")
    assert outcome.output == 2
    assert values(driver, "tokens") == ["try1", "try2"]


async def test_a_transactional_step_cannot_write(clock):
    driver = CountingDriver()

    async def wf(ctx, _):
        async def work():
            await ctx.write_stream("t", "inside")

        return await ctx.step("work", work, transaction=True)

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "failed"
    assert "transaction=True" in str(outcome.error)
    assert values(driver, "t") == []


async def test_values_written_after_the_close_are_dropped(clock, caplog):
    driver = InMemoryDriver()

    async def wf(ctx, _):
        await ctx.write_stream("s", 1)
        await ctx.close_stream("s")
        await ctx.close_stream("s")
        await ctx.write_stream("s", 2)

    await run_workflow("wf-1", wf, None, driver)
    assert values(driver, "s") == [1]
    assert "written after the stream was closed" in caplog.text


async def test_a_rollback_and_a_replay_check_write_nothing(clock):
    driver = CountingDriver()

    async def wf(ctx, _):
        await ctx.write_stream("s", "once")
        await ctx.sleep("wait", 60)

    await run_workflow("wf-1", wf, None, driver)
    assert driver.appends == [1]
    assert await check_replay("wf-1", wf, driver) is None
    await run_workflow("wf-1", wf, None, driver, cancel="cancelled")
    assert driver.appends == [1]
    assert values(driver, "s") == ["once"]


async def test_keys_and_values_are_checked_where_they_are_written(clock):
    async def bad_key(ctx, _):
        await ctx.write_stream("", 1)

    async def bad_value(ctx, _):
        await ctx.write_stream("s", {1, 2})

    outcome = await run_workflow("wf-1", bad_key, None, InMemoryDriver())
    assert isinstance(outcome.error, ValueError)
    outcome = await run_workflow("wf-2", bad_value, None, InMemoryDriver())
    assert isinstance(outcome.error, StepOutputError)


async def test_a_driver_without_streams_says_so(clock):
    class NoStreams(InMemoryDriver):
        append_streams = None

    async def wf(ctx, _):
        await ctx.write_stream("s", 1)

    outcome = await run_workflow("wf-1", wf, None, NoStreams())
    assert isinstance(outcome.error, NotImplementedError)


@pytest.mark.parametrize("close", [False, True])
async def test_two_writes_started_together_are_refused(clock, close):
    import asyncio

    from django_rivet.engine import EntryInProgressError

    async def wf(ctx, _):
        second = ctx.close_stream("s") if close else ctx.write_stream("s", 2)
        await asyncio.gather(ctx.write_stream("s", 1), second)

    outcome = await run_workflow("wf-1", wf, None, InMemoryDriver())
    assert isinstance(outcome.error, EntryInProgressError)
