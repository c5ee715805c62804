"""Eviction and cancellation of running workflows."""

from __future__ import annotations

import asyncio

import pytest

from django_rivet.engine import (
    InMemoryDriver,
    StorageError,
    cancel_workflow,
    read_workflow,
    run_workflow,
    start_workflow,
)
from django_rivet.engine.steps import no_side_effects

from .conftest import START


async def test_eviction_is_visible_through_is_evicted(clock, driver, mode):
    async def wf(ctx, _):
        while not ctx.is_evicted():
            await asyncio.sleep(0)
        return ctx.is_evicted()

    run = start_workflow("wf-1", wf, None, driver, mode)
    await asyncio.sleep(0)
    run.evict()
    outcome = await run
    assert outcome.state == "completed"
    assert outcome.output is True


async def test_an_evicted_run_stops_at_the_next_entry_and_resumes_later(
    clock, driver, mode
):
    calls = []

    async def wf(ctx, _):
        await ctx.step("one", lambda: calls.append("one"))
        while not ctx.is_evicted():
            await asyncio.sleep(0)
        await ctx.step("two", lambda: calls.append("two"))
        return "done"

    run = start_workflow("wf-1", wf, None, driver, mode)
    await asyncio.sleep(0)
    run.evict()
    outcome = await run
    assert outcome.state == "sleeping"
    assert outcome.sleep_until == START  # due again at once
    assert driver.get_alarm("wf-1") == START
    assert calls == ["one"]

    async def resumed(ctx, _):
        await ctx.step("one", lambda: calls.append("one"))
        await ctx.step("two", lambda: calls.append("two"))
        return "done"

    outcome = await run_workflow("wf-1", resumed, None, driver, mode)
    assert outcome.output == "done"
    assert calls == ["one", "two"]


async def test_cancel_marks_the_workflow_cancelled_and_clears_alarms(
    clock, driver, mode
):
    async def wf(ctx, _):
        return "done"

    run = start_workflow("wf-1", wf, None, driver, mode)
    await driver.set_alarm("wf-1", START + 1000)
    await run.cancel()
    outcome = await run
    assert outcome.state == "cancelled"
    assert (await read_workflow(driver)).state == "cancelled"
    assert driver.get_alarm("wf-1") is None
    again = await run_workflow("wf-1", wf, None, driver, mode)
    assert again.state == "cancelled"


async def test_cancelling_a_sleeping_workflow_stops_it_for_good(clock, driver, mode):
    calls = []

    async def wf(ctx, _):
        await ctx.sleep("nap", 3600)
        return await ctx.step("after", lambda: calls.append(1))

    run = start_workflow("wf-1", wf, None, driver, mode)
    for _ in range(20):
        await asyncio.sleep(0)
    await run.cancel()
    # A yield-mode run had already returned; a live one stops now.
    assert (await run).state == ("sleeping" if mode == "yield" else "cancelled")
    clock.advance(7200)
    assert (await run_workflow("wf-1", wf, None, driver, mode)).state == "cancelled"
    assert calls == []
    assert driver.get_alarm("wf-1") is None


async def test_engine_level_cancel_works_without_a_run(clock, driver):
    async def wf(ctx, _):
        await ctx.sleep("nap", 60)

    await run_workflow("wf-1", wf, None, driver)
    await cancel_workflow("wf-1", driver)
    assert driver.get_alarm("wf-1") is None
    assert (await run_workflow("wf-1", wf, None, driver)).state == "cancelled"


class CancellableHost(InMemoryDriver):
    """A host that can cancel a run from outside (``check_cancel``)."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = False
        self.checks: list[str] = []

    async def check_cancel(self) -> None:
        self.checks.append("check")
        if self.cancelled:
            raise StorageError("cancelled")


async def test_a_host_s_cancel_check_runs_before_each_new_step_attempt(clock):
    driver = CancellableHost()
    calls, runs = [], []

    async def wf(ctx, _):
        await ctx.step("one", lambda: calls.append("one"))
        await ctx.step("two", lambda: calls.append("two"), transaction=True)
        if not runs:
            driver.cancelled = True  # cancelled between the steps, once
        runs.append(1)
        await ctx.step("three", lambda: calls.append("three"))
        return "done"

    with pytest.raises(StorageError):
        await run_workflow("wf-1", wf, None, driver)
    # One check before "one" and one before "three": none before the
    # transactional step (its transaction checks), and "three" never ran.
    assert (calls, driver.checks) == (["one", "two"], ["check", "check"])
    driver.cancelled, driver.checks = False, []
    assert (await run_workflow("wf-1", wf, None, driver)).state == "completed"
    # A replay checks nothing for the recorded steps.
    assert (calls, driver.checks) == (["one", "two", "three"], ["check"])


async def test_a_step_function_without_side_effects_starts_without_a_check(clock):
    """django-rivet's own bookkeeping steps: the next step's check stands for both."""
    driver = CancellableHost()
    calls = []

    @no_side_effects
    def started():
        calls.append("started")
        return {"at": 1}

    async def wf(ctx, _):
        await ctx.step("start", started, ephemeral=True)
        await ctx.step("work", lambda: calls.append("work"))
        return "done"

    driver.cancelled = True
    with pytest.raises(StorageError):
        await run_workflow("wf-1", wf, None, driver)
    # The bookkeeping ran unchecked; the work, checked, never ran.
    assert (calls, driver.checks) == (["started"], ["check"])
