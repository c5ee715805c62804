"""ctx.get_version: new work gets the latest version, old in-flight work 1."""

from __future__ import annotations

from django_rivet.engine import HistoryDivergedError, Loop, run_workflow

from .helpers import execute


async def test_a_fresh_instance_gets_latest_and_keeps_it(clock, driver, mode):
    async def wf(ctx, _):
        version = await ctx.get_version("gate", 2)
        await ctx.step("record", lambda: version)
        return version

    assert (await execute(clock, "wf-1", wf, driver, mode)).output == 2
    assert (await execute(clock, "wf-1", wf, driver, mode)).output == 2


async def test_an_old_in_flight_instance_is_pinned_to_version_one(clock, driver, mode):
    async def v1(ctx, _):
        await ctx.step("work", lambda: "did-work")
        return "v1-done"

    async def v2(ctx, _):
        version = await ctx.get_version("gate", 2)
        if version == 1:
            done = await ctx.step("work", lambda: "should-not-run")
            return f"old:{done}"
        return "new"

    await execute(clock, "wf-1", v1, driver, mode)
    outcome = await execute(clock, "wf-1", v2, driver, mode)
    assert outcome.output == "old:did-work"


async def test_a_gate_after_other_new_entries_still_gets_latest(clock, driver, mode):
    async def wf(ctx, _):
        await ctx.step("a", lambda: "a")
        return await ctx.get_version("gate", 3)

    assert (await execute(clock, "wf-1", wf, driver, mode)).output == 3


async def test_a_finished_migration_retires_the_gate_with_removed(clock, driver, mode):
    async def gated(ctx, _):
        return f"v{await ctx.get_version('gate', 2)}"

    async def cleaned(ctx, _):
        await ctx.removed("gate", "version_check")
        return "cleaned"

    assert (await execute(clock, "wf-1", gated, driver, mode)).output == "v2"
    assert (await execute(clock, "wf-1", cleaned, driver, mode)).output == "cleaned"


async def test_another_kind_at_the_gate_location_diverges(clock, driver, mode):
    async def as_step(ctx, _):
        await ctx.step("gate", lambda: "x")

    async def as_version(ctx, _):
        await ctx.get_version("gate", 2)

    await execute(clock, "wf-1", as_step, driver, mode)
    outcome = await execute(clock, "wf-1", as_version, driver, mode)
    assert isinstance(outcome.error, HistoryDivergedError)


async def test_each_loop_iteration_resolves_its_own_version(clock, driver):
    def make(with_gate, seen):
        async def body(ctx, state):
            if with_gate:
                seen[state["i"]] = await ctx.get_version("gate", 2)
            await ctx.step("pre", lambda: f"pre-{state['i']}")
            message = await ctx.messages.next("in", names=["work"])
            await ctx.step("post", lambda: f"post:{message.body}")
            processed = state["processed"] + 1
            if processed >= 3:
                return Loop.break_(processed)
            return Loop.continue_({"i": state["i"] + 1, "processed": processed})

        async def wf(ctx, _):
            return await ctx.loop("consume", body, state={"i": 0, "processed": 0})

        return wf

    seen = {}
    await driver.add_message("work", "one")
    first = await run_workflow("wf-loop", make(False, seen), None, driver)
    assert first.state == "sleeping"  # iteration 1 recorded "pre", then waits
    await driver.add_message("work", "two")
    second = await run_workflow("wf-loop", make(True, seen), None, driver)
    assert second.state == "sleeping"
    await driver.add_message("work", "three")
    third = await run_workflow("wf-loop", make(True, seen), None, driver)
    assert third.state == "completed"
    assert seen[1] == 1  # in flight under the old code
    assert seen[2] == 2  # started under the new code
