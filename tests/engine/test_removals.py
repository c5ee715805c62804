"""ctx.removed: retire entries the code no longer makes."""

from __future__ import annotations

import pytest

from django_rivet.engine import HistoryDivergedError, Loop, read_history

from .helpers import execute


async def test_a_removed_step_is_skipped_on_replay(clock, driver, mode):
    calls = []

    async def v1(ctx, _):
        await ctx.step("old", lambda: calls.append("old"))
        return await ctx.step("keep", lambda: "kept")

    async def v2(ctx, _):
        await ctx.removed("old", "step")
        return await ctx.step("keep", lambda: "new code")

    await execute(clock, "wf-1", v1, driver, mode)
    outcome = await execute(clock, "wf-1", v2, driver, mode)
    assert outcome.output == "kept"
    assert calls == ["old"]


async def test_without_removed_the_old_entry_diverges(clock, driver, mode):
    async def v1(ctx, _):
        await ctx.step("old", lambda: 1)
        return "v1"

    async def v2(ctx, _):
        return "v2"

    await execute(clock, "wf-1", v1, driver, mode)
    outcome = await execute(clock, "wf-1", v2, driver, mode)
    assert isinstance(outcome.error, HistoryDivergedError)
    assert '"old"' in str(outcome.error)


async def test_new_instances_record_a_placeholder(clock, driver, mode):
    async def wf(ctx, _):
        await ctx.removed("gone", "sleep")
        return "ok"

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == "ok"
    [entry] = await read_history(driver)
    assert entry.kind == "removed"
    assert entry.data == {"original_type": "sleep", "original_name": "gone"}
    assert (await execute(clock, "wf-1", wf, driver, mode)).output == "ok"


async def test_removing_a_loop_covers_its_iterations(clock, driver, mode):
    async def body(ctx, state):
        await ctx.step("s", lambda: state)
        return Loop.break_(state) if state >= 2 else Loop.continue_(state + 1)

    async def v1(ctx, _):
        return await ctx.loop("old-loop", body, state=0)

    async def v2(ctx, _):
        await ctx.removed("old-loop", "loop")
        return "migrated"

    await execute(clock, "wf-1", v1, driver, mode)
    outcome = await execute(clock, "wf-1", v2, driver, mode)
    assert outcome.output == "migrated"


async def test_removed_must_name_the_recorded_kind(clock, driver, mode):
    async def v1(ctx, _):
        await ctx.step("thing", lambda: 1)

    async def v2(ctx, _):
        await ctx.removed("thing", "sleep")

    await execute(clock, "wf-1", v1, driver, mode)
    outcome = await execute(clock, "wf-1", v2, driver, mode)
    assert isinstance(outcome.error, HistoryDivergedError)


async def test_removed_rejects_unknown_kinds(clock, driver):
    async def wf(ctx, _):
        with pytest.raises(ValueError):
            ctx.removed("x", "banana")
        return "ok"

    assert (await execute(clock, "wf-1", wf, driver, "yield")).output == "ok"
