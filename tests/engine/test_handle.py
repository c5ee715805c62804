"""WorkflowRun: the controls a host has over a run."""

from __future__ import annotations

import asyncio

from django_rivet.engine import (
    WorkflowDefinition,
    read_workflow,
    run_workflow,
    start_workflow,
    workflow,
)

from .conftest import START
from .helpers import idle


async def test_messages_sent_through_the_run_reach_the_workflow(clock, driver, mode):
    async def wf(ctx, _):
        [message] = await ctx.messages.next_batch("wait", names=["message-name"])
        return message.body

    run = start_workflow("wf-1", wf, None, driver, mode)
    if mode == "yield":
        assert (await run).state == "sleeping"
        await run.send("message-name", "payload")
        outcome = await run_workflow("wf-1", wf, None, driver, mode)
    else:
        await idle(clock, run._task, until=START)
        await run.send("message-name", "payload")
        outcome = await run
    assert outcome.state == "completed" and outcome.output == "payload"


async def test_wake_sets_an_alarm_in_yield_mode_only(clock, driver, mode):
    async def wf(ctx, _):
        return "done"

    run = start_workflow("wf-1", wf, None, driver, mode)
    await run
    await run.wake()
    if mode == "yield":
        assert driver.get_alarm("wf-1") == START
    else:
        assert driver.get_alarm("wf-1") is None


async def test_wake_cuts_a_live_sleep_short(clock, driver):
    async def wf(ctx, _):
        await ctx.messages.next_batch("poll", count=1, timeout=3600)
        return clock.now()

    run = start_workflow("wf-1", wf, None, driver, "live")
    await idle(clock, run._task, until=START)
    await run.wake()
    await idle(clock, run._task, until=START)
    assert not run._task.done()  # woke, replayed, and went back to waiting
    clock.advance(3600)
    assert (await run).output == START + 3600


async def test_output_and_state_are_readable_after_the_run(clock, driver, mode):
    async def wf(ctx, input):
        return {"finished": input}

    run = start_workflow("wf-1", wf, [1, 2], driver, mode)
    outcome = await run
    assert outcome.state == "completed"
    snapshot = await run.snapshot()
    assert snapshot.state == "completed"
    assert snapshot.output == {"finished": [1, 2]}
    assert snapshot.input == [1, 2]
    assert snapshot.error is None
    assert await read_workflow(driver) == snapshot


async def test_input_is_stored_once_and_read_back_on_resume(clock, driver):
    seen = []

    async def wf(ctx, input):
        seen.append(input)
        await ctx.sleep("nap", 60)
        return input

    await run_workflow("wf-1", wf, {"n": 1}, driver)
    clock.advance(60)
    outcome = await run_workflow("wf-1", wf, {"n": 999}, driver)
    assert outcome.output == {"n": 1}
    assert seen == [{"n": 1}, {"n": 1}]


async def test_recover_through_the_run_wakes_a_live_run(clock, driver):
    fail = [True]

    def flaky():
        if fail[0]:
            raise RuntimeError("down")
        return "up"

    async def wf(ctx, _):
        return await ctx.step("s", flaky, max_retries=0)

    run = start_workflow("wf-1", wf, None, driver)
    assert (await run).state == "failed"
    fail[0] = False
    assert await run.recover()
    assert (await read_workflow(driver)).state == "sleeping"
    assert (await run_workflow("wf-1", wf, None, driver)).output == "up"


async def test_the_workflow_decorator_names_a_function(clock, driver):
    @workflow
    async def plain(ctx, input):
        return "plain"

    @workflow(name="order")
    async def named(ctx, input):
        return await ctx.step("s", lambda: input)

    assert isinstance(plain, WorkflowDefinition) and plain.name == "plain"
    assert named.name == "order" and named.fn.__name__ == "named"
    outcome = await run_workflow("wf-1", named, 7, driver)
    assert outcome.output == 7


async def test_a_run_can_be_awaited_twice(clock, driver):
    async def wf(ctx, _):
        await asyncio.sleep(0)
        return 1

    run = start_workflow("wf-1", wf, None, driver)
    assert await run == await run.result()
