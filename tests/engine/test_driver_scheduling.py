"""Alarms: what the driver keeps and when the engine sets or clears them."""

from __future__ import annotations

from django_rivet.engine import run_workflow

from .conftest import START


async def test_alarms_are_set_and_cleared(clock, driver):
    await driver.set_alarm("wf-1", START + 1000)
    assert driver.get_alarm("wf-1") == START + 1000
    await driver.clear_alarm("wf-1")
    assert driver.get_alarm("wf-1") is None


async def test_due_alarms_are_listed(clock, driver):
    await driver.set_alarm("wf-due", START - 1)
    await driver.set_alarm("wf-now", START)
    await driver.set_alarm("wf-later", START + 1000)
    assert sorted(driver.due_alarms()) == ["wf-due", "wf-now"]
    clock.advance(1000)
    assert sorted(driver.due_alarms()) == ["wf-due", "wf-later", "wf-now"]


async def test_the_poll_interval_is_positive(clock, driver):
    assert driver.worker_poll_interval > 0


async def test_a_sleeping_workflow_sets_its_alarm_and_completion_clears_it(
    clock, driver
):
    async def wf(ctx, _):
        await ctx.sleep("nap", 90)
        return "done"

    await run_workflow("wf-1", wf, None, driver)
    assert driver.due_alarms() == []
    clock.advance(90)
    assert driver.due_alarms() == ["wf-1"]
    await run_workflow("wf-1", wf, None, driver)
    assert driver.get_alarm("wf-1") is None


async def test_a_message_only_wait_leaves_no_alarm(clock, driver):
    await driver.set_alarm("wf-1", START + 5)

    async def wf(ctx, _):
        return (await ctx.messages.next("m", names=["go"])).body

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.waiting_for == ["go"]
    assert driver.get_alarm("wf-1") is None
