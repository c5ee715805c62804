"""ctx.sleep / ctx.sleep_until: durable deadlines, in-memory short sleeps."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from django_rivet.engine import read_history, run_workflow, start_workflow

from .conftest import START
from .helpers import drive, execute


async def test_a_long_sleep_yields_with_its_wake_time(clock, driver):
    calls = []

    async def wf(ctx, _):
        await ctx.sleep("nap", 60)
        return await ctx.step("after", lambda: calls.append(1) or "done")

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "sleeping"
    assert outcome.sleep_until == START + 60
    assert outcome.waiting_for == []
    assert driver.get_alarm("wf-1") == START + 60
    clock.advance(60)
    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "completed" and outcome.output == "done"
    assert calls == [1]
    assert driver.get_alarm("wf-1") is None


async def test_the_recorded_deadline_wins_on_replay(clock, driver):
    async def wf(ctx, _):
        await ctx.sleep("nap", timedelta(minutes=1))
        return "done"

    await run_workflow("wf-1", wf, None, driver)
    clock.advance(30)
    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "sleeping"
    assert outcome.sleep_until == START + 60


async def test_live_mode_sleeps_in_process(clock, driver):
    async def wf(ctx, _):
        await ctx.sleep("nap", 3600)
        return clock.now()

    outcome = await drive(clock, run_workflow("wf-1", wf, None, driver, "live"))
    assert outcome.state == "completed"
    assert outcome.output == START + 3600


async def test_short_sleeps_wait_in_memory_in_both_modes(clock, driver, mode):
    driver.worker_poll_interval = 5.0

    async def wf(ctx, _):
        await ctx.sleep("blink", 0.5)
        return clock.now()

    task = asyncio.ensure_future(run_workflow("wf-1", wf, None, driver, mode))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done()  # waiting in memory, not yielding
    clock.advance(0.5)
    outcome = await task
    assert outcome.state == "completed"
    assert outcome.output == START + 0.5
    [entry] = await read_history(driver)
    assert entry.kind == "sleep" and entry.status == "completed"


async def test_sleep_until_takes_a_datetime_or_a_timestamp(clock, driver, mode):
    target = datetime.fromtimestamp(START + 120, UTC)

    async def wf(ctx, _):
        await ctx.sleep_until("until-dt", target)
        await ctx.sleep_until("until-ts", START + 240)
        return clock.now()

    if mode == "yield":
        first = await run_workflow("wf-1", wf, None, driver)
        assert first.sleep_until == START + 120
        clock.set(first.sleep_until)
        second = await run_workflow("wf-1", wf, None, driver)
        assert second.sleep_until == START + 240
        clock.set(second.sleep_until)
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == START + 240


async def test_a_deadline_in_the_past_completes_at_once(clock, driver, mode):
    async def wf(ctx, _):
        await ctx.sleep_until("past", START - 10)
        await ctx.sleep("zero", 0)
        return "done"

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == "done"
    assert [h.status for h in await read_history(driver)] == ["completed"] * 2


async def test_eviction_interrupts_an_in_memory_sleep(clock, driver):
    driver.worker_poll_interval = 10.0

    async def wf(ctx, _):
        await ctx.sleep("blink", 5)
        return "done"

    run = start_workflow("wf-1", wf, None, driver)
    for _ in range(10):
        await asyncio.sleep(0)
    run.evict()
    outcome = await run
    assert outcome.state == "sleeping"
    clock.advance(5)
    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "completed"
