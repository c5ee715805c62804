"""HistoryDivergedError in every scope, including the root."""

from __future__ import annotations

from django_rivet.engine import HistoryDivergedError, Loop, run_workflow

from .helpers import execute


async def test_an_unvisited_root_entry_is_detected(clock, driver, mode):
    async def v1(ctx, _):
        await ctx.step("a", lambda: 1)
        await ctx.step("b", lambda: 2)
        return "v1"

    async def v2(ctx, _):
        await ctx.step("a", lambda: 1)
        return "v2"

    await execute(clock, "wf-1", v1, driver, mode)
    outcome = await execute(clock, "wf-1", v2, driver, mode)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, HistoryDivergedError)
    assert '"b"' in str(outcome.error)


async def test_an_unvisited_entry_in_a_loop_iteration_is_detected(clock, driver):
    async def breaks_late(ctx, _):
        async def body(ctx, state):
            await ctx.step("a", lambda: 1)
            await ctx.sleep("pause", 60)
            return Loop.break_(state)

        return await ctx.loop("l", body, state=0)

    async def breaks_early(ctx, _):
        async def body(ctx, state):
            await ctx.step("a", lambda: 1)
            return Loop.break_(state)

        return await ctx.loop("l", body, state=0)

    assert (await run_workflow("wf-1", breaks_late, None, driver)).state == "sleeping"
    outcome = await run_workflow("wf-1", breaks_early, None, driver)
    assert isinstance(outcome.error, HistoryDivergedError)
    assert "l/~0/pause" in str(outcome.error)


async def test_an_unvisited_entry_under_a_scope_that_vanished_is_detected(
    clock, driver
):
    async def v1(ctx, _):
        await ctx.try_block("block", lambda c: c.step("inner", lambda: 1))
        return "v1"

    async def v2(ctx, _):
        return "v2"

    await run_workflow("wf-1", v1, None, driver)
    outcome = await run_workflow("wf-1", v2, None, driver)
    assert isinstance(outcome.error, HistoryDivergedError)
    assert "block/inner" in str(outcome.error)


async def test_duplicate_names_in_nested_scopes_are_detected(clock, driver, mode):
    async def body(ctx, state):
        await ctx.step("x", lambda: 1)
        await ctx.sleep("x", 0)
        return Loop.break_(None)

    async def wf(ctx, _):
        return await ctx.loop("l", body)

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert isinstance(outcome.error, HistoryDivergedError)
    assert "Duplicate" in str(outcome.error)


async def test_the_same_name_in_different_scopes_is_fine(clock, driver, mode):
    async def body(ctx, state):
        await ctx.step("x", lambda: state)
        return Loop.break_(state) if state else Loop.continue_(state + 1)

    async def wf(ctx, _):
        await ctx.step("x", lambda: "root")
        await ctx.loop("l", body, state=0)
        await ctx.join("j", {"a": lambda c: c.step("x", lambda: "a")})
        return "ok"

    assert (await execute(clock, "wf-1", wf, driver, mode)).output == "ok"


async def test_finished_loops_and_joins_do_not_count_as_unvisited(clock, driver):
    async def body(ctx, state):
        await ctx.step("x", lambda: state)
        return Loop.break_(state) if state >= 3 else Loop.continue_(state + 1)

    async def wf(ctx, _):
        await ctx.loop("l", body, state=0, history_prune_interval=2)
        await ctx.join("j", {"a": lambda c: c.step("x", lambda: "a")})
        await ctx.race("r", {"b": lambda c: c.step("x", lambda: "b")})
        await ctx.sleep("nap", 60)
        return "ok"

    assert (await run_workflow("wf-1", wf, None, driver)).state == "sleeping"
    clock.advance(60)
    assert (await run_workflow("wf-1", wf, None, driver)).output == "ok"
    assert (await run_workflow("wf-1", wf, None, driver)).output == "ok"
