"""ctx.loop: state, resume, break, and pruning of old iterations."""

from __future__ import annotations

import pytest

from django_rivet.engine import (
    Loop,
    keys,
    read_history,
    run_workflow,
    start_workflow,
)
from django_rivet.engine.storage import Storage

from .helpers import RecordingDriver, execute, idle, run_to_end


def iterations_left(storage: Storage) -> set[int]:
    return {
        segment[1]
        for location in storage.entries
        for segment in location
        if isinstance(segment, tuple)
    }


async def test_a_loop_carries_state_until_it_breaks(clock, driver, mode):
    async def body(ctx, state):
        if state["count"] >= 3:
            return Loop.break_(state["count"])
        await ctx.step(f"step-{state['count']}", lambda: None)
        return Loop.continue_({"count": state["count"] + 1})

    async def wf(ctx, _):
        return await ctx.loop("count-loop", body, state={"count": 0})

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "completed"
    assert outcome.output == 3


async def test_stateless_loops_and_none_meaning_continue(clock, driver, mode):
    seen = []

    async def body(ctx, state):
        seen.append(state)
        if len(seen) >= 3:
            return Loop.break_("done")
        return None

    async def wf(ctx, _):
        return await ctx.loop("stateless", body)

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == "done"
    assert seen == [None, None, None]


async def test_a_finished_loop_replays_its_output_without_running(clock, driver, mode):
    calls = []

    async def body(ctx, state):
        calls.append(1)
        return Loop.break_(None)

    async def wf(ctx, _):
        return await ctx.loop("void-output", body)

    for _ in range(2):
        outcome = await execute(clock, "wf-1", wf, driver, mode)
        assert outcome.state == "completed" and outcome.output is None
    assert calls == [1]


async def test_a_loop_resumes_from_its_last_committed_state(clock, driver, mode):
    executed = []
    crash = [True]

    async def body(ctx, state):
        executed.append(state)
        await ctx.step(f"step-{state}", lambda: state)
        if state >= 5:
            return Loop.break_(state)
        if state == 3 and crash[0]:
            raise RuntimeError("crash after state save")
        return Loop.continue_(state + 1)

    async def wf(ctx, _):
        return await ctx.loop("resume", body, state=0, history_prune_interval=2)

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "failed"
    crash[0] = False
    executed.clear()
    # The failure was not in a step: a re-run replays and carries on.
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "completed" and outcome.output == 5
    # Every finished iteration was saved: the resume starts at the one that
    # crashed (3), not at the last pruning point (2) nor at 0.
    assert executed[0] == 3


async def test_old_iterations_are_pruned_at_each_interval(clock, driver, mode):
    async def body(ctx, state):
        await ctx.step(f"step-{state}", lambda: None)
        if state >= 4:
            return Loop.break_(state)
        return Loop.continue_(state + 1)

    async def wf(ctx, _):
        return await ctx.loop("cleanup", body, state=0, history_prune_interval=2)

    await execute(clock, "wf-1", wf, driver, mode)
    assert min(iterations_left(await Storage.load(driver))) >= 2


async def test_nine_iterations_with_interval_three_make_two_range_deletes(clock, mode):
    driver = RecordingDriver()

    async def body(ctx, state):
        await ctx.step(f"step-{state}", lambda: None)
        if state >= 8:
            return Loop.break_(state)
        return Loop.continue_(state + 1)

    async def wf(ctx, _):
        return await ctx.loop("efficient", body, state=0, history_prune_interval=3)

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == 8
    # Prune at 3 deletes nothing, at 6 iterations 0-2, at the break (9) 3-5.
    assert len(driver.range_deletes) == 2
    assert iterations_left(await Storage.load(driver)) == {6, 7, 8}
    # Replaying the finished loop deletes nothing more.
    await execute(clock, "wf-1", wf, driver, mode)
    assert len(driver.range_deletes) == 2


async def test_history_size_keeps_more_iterations_than_the_interval(clock, driver):
    async def body(ctx, state):
        await ctx.step("s", lambda: state)
        return Loop.break_(state) if state >= 9 else Loop.continue_(state + 1)

    async def wf(ctx, _):
        return await ctx.loop(
            "keep", body, state=0, history_prune_interval=5, history_size=7
        )

    await run_workflow("wf-1", wf, None, driver)
    assert iterations_left(await Storage.load(driver)) == set(range(3, 10))


@pytest.mark.parametrize(
    ("last", "interval", "left"),
    [(2, 10, {0, 1, 2}), (3, 1, {3})],
    ids=[
        "breaking-before-the-first-interval-prunes-nothing",
        "interval-one-keeps-only-the-last-iteration",
    ],
)
async def test_a_loop_keeps_the_iterations_since_its_last_prune(
    clock, driver, mode, last, interval, left
):
    async def body(ctx, state):
        await ctx.step(f"step-{state}", lambda: None)
        return Loop.break_(state) if state >= last else Loop.continue_(state + 1)

    async def wf(ctx, _):
        return await ctx.loop("l", body, state=0, history_prune_interval=interval)

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == last
    assert iterations_left(await Storage.load(driver)) == left


async def test_loop_errors_propagate(clock, driver, mode):
    async def body(ctx, state):
        raise RuntimeError("loop failure")

    async def wf(ctx, _):
        return await ctx.loop("error-loop", body)

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "failed"
    assert str(outcome.error) == "loop failure"


async def test_iteration_locations_read_like_name_tilde_number(clock, driver):
    async def body(ctx, state):
        await ctx.step("fetch", lambda: state)
        return Loop.break_(state) if state >= 1 else Loop.continue_(state + 1)

    async def wf(ctx, _):
        return await ctx.loop("sum", body, state=0)

    await run_workflow("wf-1", wf, None, driver)
    locations = [entry.location for entry in await read_history(driver)]
    assert locations == ["sum", "sum/~0/fetch", "sum/~1/fetch"]


async def test_loop_iterations_are_nested_tuples_in_the_key(clock, driver):
    async def body(ctx, state):
        await ctx.step("fetch", lambda: 1)
        return Loop.break_(1)

    async def wf(ctx, _):
        return await ctx.loop("sum", body)

    await run_workflow("wf-1", wf, None, driver)
    storage = await Storage.load(driver)
    loop = storage.name_index("sum")
    fetch = storage.name_index("fetch")
    assert keys.entry_key((loop, (loop, 0), fetch)) in driver.kv


async def test_a_body_returning_garbage_fails(clock, driver):
    async def body(ctx, state):
        return 42

    async def wf(ctx, _):
        return await ctx.loop("bad", body)

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert isinstance(outcome.error, TypeError)


async def test_each_finished_iteration_is_saved_so_pauses_resume_after_it(
    clock, driver, mode
):
    """Issue 16 item 4: a message-receiving body ran its code again on resume."""
    ran = []

    async def body(ctx, state):
        ran.append(state)  # code around the entries: runs once per iteration
        message = await ctx.messages.next("m")
        total = state + message.body
        return Loop.break_(total) if message.body == 3 else Loop.continue_(total)

    async def wf(ctx, _):
        return await ctx.loop("inbox", body, state=0)

    run = start_workflow("wf-1", wf, None, driver, mode)
    for value in (1, 2, 3):
        await idle(clock, run._task, until=clock.now())
        if mode == "yield":
            outcome = await run
            assert outcome.state == "sleeping" and outcome.waiting_for == ["*"]
        await driver.add_message("m", value)
        if mode == "yield":
            run = start_workflow("wf-1", wf, None, driver, mode)
    outcome = await run
    assert outcome.output == 6
    # Each resume re-runs the waiting iteration up to its wait, and only it:
    # finished iterations are never run again.
    assert ran == [0, 0, 1, 1, 3, 3]
    [loop] = [h for h in await read_history(driver) if h.kind == "loop"]
    assert loop.data["iteration"] == 2 and loop.output == 6


async def test_a_retry_backoff_in_a_loop_resumes_after_the_last_iteration(
    clock, driver, mode
):
    ran = []
    failures = []

    def flaky():
        if not failures:
            failures.append(1)
            raise RuntimeError("once")
        return "ok"

    async def body(ctx, state):
        ran.append(state)
        if state == 2:
            await ctx.step("flaky", flaky, retry_backoff_base=5)
        else:
            await ctx.step("plain", lambda: state)
        return Loop.break_(state) if state == 3 else Loop.continue_(state + 1)

    async def wf(ctx, _):
        return await ctx.loop("l", body, state=0)

    outcome = await run_to_end(clock, "wf-1", wf, driver, mode)
    assert outcome.output == 3
    assert ran == [0, 1, 2, 2, 3]  # iterations 0 and 1 were not run again


async def test_saving_each_iteration_adds_no_flush(clock, mode):
    """The loop entry joins the flush each iteration's step already makes."""
    driver = RecordingDriver()

    async def body(ctx, state):
        await ctx.step("s", lambda: state)
        return Loop.break_(state) if state == 9 else Loop.continue_(state + 1)

    async def wf(ctx, _):
        return await ctx.loop("l", body, state=0, history_prune_interval=100)

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == 9
    # One flush per step, one for the finished loop and the final one.
    assert len(driver.batches) == 10 + 2
