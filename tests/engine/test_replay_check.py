"""check_replay: recorded history against changed code, running nothing."""

from __future__ import annotations

from django_rivet.engine import ReplayDivergence, check_replay

from .helpers import RecordingDriver, execute


def make(*names, wait="approve", kinds=None):
    """A workflow of steps ``names``, then a wait for ``wait``."""
    kinds = kinds or {}

    async def wf(ctx, _):
        for name in names:
            if kinds.get(name) == "sleep":
                await ctx.sleep(name, 0)
            else:
                await ctx.step(name, lambda name=name: f"out-{name}")
        message = await ctx.messages.next("wait", names=[wait])
        await ctx.step("after", lambda: message.body)
        return "done"

    return wf


async def in_flight(clock, driver, wf):
    outcome = await execute(clock, "wf-1", wf, driver, "yield")
    assert outcome.state == "sleeping" and outcome.waiting_for
    return driver


async def test_unchanged_code_replays_cleanly_and_nothing_is_written(clock):
    driver = await in_flight(clock, RecordingDriver(), make("a", "b"))
    before = (len(driver.batches), list(driver.calls), dict(driver.kv))
    assert await check_replay("wf-1", make("a", "b"), driver) is None
    assert (len(driver.batches), list(driver.calls), dict(driver.kv)) == before


async def test_a_renamed_step_is_found_at_its_recorded_location(clock, driver):
    await in_flight(clock, driver, make("a", "b"))
    found = await check_replay("wf-1", make("a", "b2"), driver)
    assert isinstance(found, ReplayDivergence)
    assert (found.workflow_id, found.location, found.code) == (
        "wf-1",
        "b",
        "history_diverged",
    )
    assert "this run did not reach it" in found.reason
    # Both causes are named: a changed code, or a non-deterministic workflow.
    assert "code changed" in found.reason and "not deterministic" in found.reason


async def test_a_changed_entry_kind_is_found(clock, driver):
    await in_flight(clock, driver, make("a", "b"))
    found = await check_replay("wf-1", make("a", "b", kinds={"b": "sleep"}), driver)
    assert found is not None and found.location == "b"
    assert "Expected a sleep" in found.reason


async def test_a_step_inserted_before_recorded_work_is_found(clock, driver):
    await in_flight(clock, driver, make("a", "b"))
    found = await check_replay("wf-1", make("new", "a", "b"), driver)
    assert found is not None and found.location == "a"


async def test_steps_added_after_the_recorded_history_are_fine(clock, driver):
    await in_flight(clock, driver, make("a", "b"))

    async def extended(ctx, _):
        await ctx.step("a", lambda: 0)
        await ctx.step("b", lambda: 0)
        message = await ctx.messages.next("wait", names=["approve"])
        await ctx.step("audit", lambda: 0)  # new work after the wait: fine
        await ctx.step("after", lambda: message.body)
        return "done"

    assert await check_replay("wf-1", extended, driver) is None


async def test_retiring_the_old_step_with_removed_passes(clock, driver):
    await in_flight(clock, driver, make("a", "b"))

    async def fixed(ctx, _):
        await ctx.step("a", lambda: 0)
        await ctx.removed("b", "step")
        message = await ctx.messages.next("wait", names=["approve"])
        return message.body

    assert await check_replay("wf-1", fixed, driver) is None


async def test_a_renamed_pending_wait_is_found(clock, driver):
    # A run would wait under the new name, and fail once the scope ends.
    await in_flight(clock, driver, make("a", "b"))

    async def renamed(ctx, _):
        await ctx.step("a", lambda: 0)
        await ctx.step("b", lambda: 0)
        return await ctx.messages.next("wait-for-it", names=["approve"])

    found = await check_replay("wf-1", renamed, driver)
    assert found is not None and found.location == "wait"


async def test_new_work_before_a_pending_wait_needs_a_version_gate(clock, driver):
    await in_flight(clock, driver, make("a", "b"))

    def changed(gated):
        async def wf(ctx, _):
            await ctx.step("a", lambda: 0)
            await ctx.step("b", lambda: 0)
            if not gated or await ctx.get_version("audit", 2) >= 2:
                await ctx.step("audit", lambda: 0)
            return await ctx.messages.next("wait", names=["approve"])

        return wf

    found = await check_replay("wf-1", changed(gated=False), driver)
    assert found is not None and found.location == "wait"
    assert await check_replay("wf-1", changed(gated=True), driver) is None


async def test_code_raising_on_recorded_values_is_reported(clock, driver):
    await in_flight(clock, driver, make("a"))

    async def strict(ctx, _):
        value = await ctx.step("a", lambda: {})
        return value["missing"]  # the recorded output is a string now

    found = await check_replay("wf-1", strict, driver)
    assert found is not None
    assert (found.location, found.code) == ("a", "replay_error")
    assert "TypeError" in found.reason


async def test_a_divergence_inside_a_join_branch_is_not_swallowed(clock, driver):
    def joined(branch_step):
        async def wf(ctx, _):
            async def left(ctx):
                await ctx.step(branch_step, lambda: 1)
                return await ctx.messages.next("wait", names=["go"])

            async def right(ctx):
                return await ctx.step("r", lambda: 2)

            return await ctx.join("both", {"left": left, "right": right})

        return wf

    await in_flight(clock, driver, joined("l"))
    assert await check_replay("wf-1", joined("l"), driver) is None
    found = await check_replay("wf-1", joined("l-renamed"), driver)
    assert found is not None and found.location == "both/left/l"


async def test_a_version_gate_lets_new_code_meet_old_history(clock, driver):
    await in_flight(clock, driver, make("a", "b"))

    async def gated(ctx, _):
        version = await ctx.get_version("v2", 2)
        await ctx.step("a", lambda: 0)
        await ctx.step("b" if version == 1 else "b2", lambda: 0)
        message = await ctx.messages.next("wait", names=["approve"])
        return message.body

    assert await check_replay("wf-1", gated, driver) is None
