"""ctx.race: the first branch wins, losers are cancelled and forgotten."""

from __future__ import annotations

import asyncio

from django_rivet.engine import RaceError, read_history, run_workflow

from .conftest import START
from .helpers import drive, execute


async def _sleep_then(ctx, seconds, value):
    await ctx.sleep("wait", seconds)
    return value


async def test_the_first_branch_to_finish_wins(clock, driver, mode):
    async def wf(ctx, _):
        return await ctx.race(
            "timeout",
            {
                "work": lambda c: c.step("do-work", lambda: "result"),
                "timeout": lambda c: _sleep_then(c, 30, None),
            },
        )

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == ["work", "result"]


async def test_losers_are_cancelled_and_their_history_deleted(clock, driver, mode):
    cancelled = []

    async def slow_work():
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def loser(ctx):
        await ctx.step("recorded", lambda: "kept?")
        return await ctx.step("blocked", slow_work, timeout=None)

    async def winner(ctx):
        await ctx.sleep("wait", 0.1)
        return "won"

    async def wf(ctx, _):
        driver.worker_poll_interval = 1.0
        return await ctx.race("r", {"loser": loser, "winner": winner})

    outcome = await drive(clock, run_workflow("wf-1", wf, None, driver, mode))
    assert outcome.output == ["winner", "won"]
    assert cancelled == [True]
    history = await read_history(driver)
    assert [h.location for h in history] == ["r", "r/winner/wait"]
    assert history[0].data["branches"]["loser"] == {"status": "cancelled"}
    assert not any(b"kept?" in value for value in driver.kv.values())


async def test_a_recorded_winner_is_replayed(clock, driver, mode):
    calls = []

    async def wf(ctx, _):
        return await ctx.race(
            "r",
            {
                "a": lambda c: c.step("s", lambda: calls.append("a") or "A"),
                "b": lambda c: _sleep_then(c, 1000, "B"),
            },
        )

    first = await execute(clock, "wf-1", wf, driver, mode)
    second = await execute(clock, "wf-1", wf, driver, mode)
    assert first.output == second.output == ["a", "A"]
    assert calls == ["a"]


async def test_a_failing_branch_does_not_stop_the_race(clock, driver, mode):
    async def wf(ctx, _):
        return await ctx.race(
            "r",
            {
                "bad": lambda c: _fail("nope"),
                "good": lambda c: _sleep_then(c, 60, "good"),
            },
        )

    if mode == "yield":
        outcome = await run_workflow("wf-1", wf, None, driver)
        assert outcome.state == "sleeping" and outcome.sleep_until == START + 60
        clock.advance(60)
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == ["good", "good"]


async def _fail(message):
    raise RuntimeError(message)


async def test_race_error_when_every_branch_fails(clock, driver, mode):
    async def wf(ctx, _):
        return await ctx.race(
            "r", {"a": lambda c: _fail("first"), "b": lambda c: _fail("second")}
        )

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, RaceError)
    assert {k: str(v) for k, v in outcome.error.errors.items()} == {
        "a": "first",
        "b": "second",
    }


async def test_paused_branches_pause_the_race(clock, driver):
    async def wf(ctx, _):
        return await ctx.race(
            "r",
            {
                "msg": lambda c: c.messages.next("m", names=["go"]),
                "nap": lambda c: _sleep_then(c, 500, "slept"),
            },
        )

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "sleeping"
    assert outcome.sleep_until == START + 500
    assert outcome.waiting_for == ["go"]
    await driver.add_message("go", "now")
    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.output[0] == "msg"
    assert [h.location for h in await read_history(driver)] == ["r", "r/msg/m"]
