"""ctx.join: parallel branches, merged pauses, per-branch errors."""

from __future__ import annotations

import asyncio

from django_rivet.engine import (
    HistoryDivergedError,
    JoinError,
    read_history,
    run_workflow,
)

from .conftest import START
from .helpers import execute


async def test_join_runs_every_branch_in_parallel(clock, driver, mode):
    order = []

    async def branch(ctx, name):
        async def work():
            order.append(f"start-{name}")
            await asyncio.sleep(0)
            order.append(f"end-{name}")
            return name.upper()

        return await ctx.step("work", work)

    async def wf(ctx, _):
        return await ctx.join(
            "fetch-all",
            {
                "user": lambda c: branch(c, "user"),
                "posts": lambda c: branch(c, "posts"),
            },
        )

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == {"user": "USER", "posts": "POSTS"}
    assert order.index("start-posts") < order.index("end-user")
    locations = [h.location for h in await read_history(driver)]
    assert locations == ["fetch-all", "fetch-all/user/work", "fetch-all/posts/work"]


async def test_completed_branches_replay_without_running(clock, driver, mode):
    calls = []

    async def wf(ctx, _):
        return await ctx.join(
            "j",
            {
                "a": lambda c: c.step("s", lambda: calls.append("a") or 1),
                "b": lambda c: c.step("s", lambda: calls.append("b") or 2),
            },
        )

    first = await execute(clock, "wf-1", wf, driver, mode)
    second = await execute(clock, "wf-1", wf, driver, mode)
    assert first.output == second.output == {"a": 1, "b": 2}
    assert sorted(calls) == ["a", "b"]


async def test_branch_errors_are_collected_into_a_join_error(clock, driver, mode):
    def boom():
        raise ValueError("boom")

    async def wf(ctx, _):
        return await ctx.join(
            "j",
            {
                "ok": lambda c: c.step("s", lambda: "fine"),
                "bad": lambda c: c.step("s", boom, max_retries=0),
                "worse": lambda c: _raise(RuntimeError("worse")),
            },
        )

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, JoinError)
    assert set(outcome.error.errors) == {"bad", "worse"}
    assert "boom" in str(outcome.error.errors["bad"])
    again = await execute(clock, "wf-1", wf, driver, mode)
    assert isinstance(again.error, JoinError)
    assert set(again.error.errors) == {"bad", "worse"}


async def _raise(error):
    raise error


async def test_branch_pauses_merge_earliest_deadline_and_all_names(clock, driver):
    async def wf(ctx, _):
        return await ctx.join(
            "j",
            {
                "nap": lambda c: c.sleep("z", 300),
                "short": lambda c: c.sleep("z", 120),
                "inbox": lambda c: c.messages.next("m", names=["approve"]),
                "other": lambda c: c.messages.next("m", names=["reject"]),
                "done": lambda c: c.step("s", lambda: "ok"),
            },
        )

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "sleeping"
    assert outcome.sleep_until == START + 120
    assert sorted(outcome.waiting_for) == ["approve", "reject"]
    assert driver.get_alarm("wf-1") == START + 120
    clock.advance(300)
    await driver.add_message("approve", "yes")
    await driver.add_message("reject", "no")
    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "completed"
    assert outcome.output["done"] == "ok"
    assert outcome.output["inbox"]["body"] == "yes"


async def test_message_only_pauses_have_no_deadline(clock, driver):
    async def wf(ctx, _):
        return await ctx.join(
            "j",
            {
                "a": lambda c: c.messages.next("m", names=["x"]),
                "b": lambda c: c.messages.next("m", names=["y"]),
            },
        )

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.sleep_until is None
    assert outcome.waiting_for == ["x", "y"]


async def test_live_join_waits_for_every_branch(clock, driver):
    from .helpers import drive

    async def wf(ctx, _):
        return await ctx.join(
            "j",
            {
                "slow": lambda c: _sleep_then(c, 100, "slow"),
                "fast": lambda c: _sleep_then(c, 10, "fast"),
            },
        )

    outcome = await drive(clock, run_workflow("wf-1", wf, None, driver, "live"))
    assert outcome.output == {"slow": "slow", "fast": "fast"}
    assert clock.now() == START + 100


async def _sleep_then(ctx, seconds, value):
    await ctx.sleep("z", seconds)
    return value


async def test_a_recorded_branch_missing_from_the_code_diverges(clock, driver):
    async def two(ctx, _):
        return await ctx.join("j", {"a": lambda c: _value(1), "b": lambda c: _value(2)})

    async def one(ctx, _):
        return await ctx.join("j", {"a": lambda c: _value(1)})

    await run_workflow("wf-1", two, None, driver)
    outcome = await run_workflow("wf-1", one, None, driver)
    assert isinstance(outcome.error, HistoryDivergedError)


async def _value(value):
    return value


async def test_branches_may_be_plain_functions(clock, driver):
    async def wf(ctx, _):
        return await ctx.join("j", {"sync": lambda c: "plain", "none": lambda c: None})

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.output == {"sync": "plain", "none": None}
