"""replay_from: delete a step and what followed it, then run again."""

from __future__ import annotations

import pytest

from django_rivet.engine import (
    EntryNotFoundError,
    Loop,
    ReplayRefusedError,
    read_history,
    read_workflow,
    replay_from,
    run_workflow,
)
from django_rivet.engine.storage import Storage

from .conftest import START


async def step_id(driver, location):
    return next(h.id for h in await read_history(driver) if h.location == location)


async def test_replay_reruns_the_target_step_and_everything_after(clock, driver):
    timeline = []

    async def wf(ctx, _):
        for name in ("one", "two", "three"):
            await ctx.step(name, lambda name=name: timeline.append(name))
        return len(timeline)

    await run_workflow("wf-1", wf, None, driver)
    timeline.clear()
    remaining = await replay_from("wf-1", driver, await step_id(driver, "two"))
    assert [h.location for h in remaining] == ["one"]
    snapshot = await read_workflow(driver)
    assert snapshot.state == "sleeping" and snapshot.output is None
    assert driver.get_alarm("wf-1") == START
    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "completed"
    assert timeline == ["two", "three"]


async def test_replay_without_a_target_starts_over_with_the_same_input(clock, driver):
    timeline = []

    async def wf(ctx, input):
        await ctx.step("one", lambda: timeline.append("one"))
        await ctx.step("two", lambda: timeline.append("two"))
        return input

    await run_workflow("wf-1", wf, {"n": 1}, driver)
    timeline.clear()
    assert await replay_from("wf-1", driver) == []
    outcome = await run_workflow("wf-1", wf, {"n": 2}, driver)
    assert outcome.output == {"n": 1}
    assert timeline == ["one", "two"]


async def test_a_step_in_a_loop_rewinds_the_enclosing_loop(clock, driver):
    timeline = []

    async def body(ctx, state):
        await ctx.step(f"loop-step-{state}", lambda: timeline.append(f"loop-{state}"))
        return Loop.break_(state) if state >= 1 else Loop.continue_(state + 1)

    async def wf(ctx, _):
        await ctx.step("before", lambda: timeline.append("before"))
        await ctx.loop("repeat", body, state=0)
        await ctx.step("after", lambda: timeline.append("after"))

    await run_workflow("wf-1", wf, None, driver)
    timeline.clear()
    await replay_from("wf-1", driver, await step_id(driver, "repeat/~1/loop-step-1"))
    assert [h.location for h in await read_history(driver)] == ["before"]
    await run_workflow("wf-1", wf, None, driver)
    assert timeline == ["loop-0", "loop-1", "after"]


async def test_replay_works_inside_a_sleeping_loop(clock, driver):
    timeline = []

    async def body(ctx, state):
        if state == 0:
            await ctx.step("loop-step-0", lambda: timeline.append("loop-0"))
            return Loop.continue_(1)
        await ctx.step("loop-step-1", lambda: timeline.append("loop-1"))
        await ctx.sleep("pause", 20)
        return Loop.break_("done")

    async def wf(ctx, _):
        await ctx.step("before", lambda: timeline.append("before"))
        await ctx.loop("repeat", body, state=0)
        await ctx.step("after", lambda: timeline.append("after"))

    assert (await run_workflow("wf-1", wf, None, driver)).state == "sleeping"
    timeline.clear()
    await replay_from("wf-1", driver, await step_id(driver, "repeat/~1/loop-step-1"))
    assert (await run_workflow("wf-1", wf, None, driver)).state == "sleeping"
    clock.advance(30)
    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "completed"
    assert timeline == ["loop-0", "loop-1", "after"]


async def test_a_step_in_a_join_branch_reruns_the_join(clock, driver):
    timeline = []

    async def wf(ctx, _):
        await ctx.join(
            "j",
            {
                "a": lambda c: c.step("s", lambda: timeline.append("a")),
                "b": lambda c: c.step("s", lambda: timeline.append("b")),
            },
        )
        await ctx.step("after", lambda: timeline.append("after"))

    await run_workflow("wf-1", wf, None, driver)
    timeline.clear()
    await replay_from("wf-1", driver, await step_id(driver, "j/b/s"))
    await run_workflow("wf-1", wf, None, driver)
    assert sorted(timeline) == ["a", "after", "b"]


async def test_replay_refuses_while_a_kept_step_is_running(clock, driver):
    async def wf(ctx, _):
        await ctx.step("one", lambda: 1)
        await ctx.step("two", lambda: 2)

    await run_workflow("wf-1", wf, None, driver)
    storage = await Storage.load(driver)
    first = min(storage.entries.values(), key=lambda e: e.seq)
    storage.metadata[first.id].status = "running"
    storage.metadata[first.id].touch()
    await storage.flush()
    with pytest.raises(ReplayRefusedError):
        await replay_from("wf-1", driver, await step_id(driver, "two"))
    # Deleting the running step itself is fine.
    await replay_from("wf-1", driver, first.id)


async def test_replay_rejects_unknown_ids_and_non_steps(clock, driver):
    async def wf(ctx, _):
        await ctx.sleep("nap", 0)

    await run_workflow("wf-1", wf, None, driver)
    with pytest.raises(EntryNotFoundError):
        await replay_from("wf-1", driver, "nope")
    with pytest.raises(ReplayRefusedError):
        await replay_from("wf-1", driver, await step_id(driver, "nap"))
