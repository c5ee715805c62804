"""try_step and try_block: failures as values instead of exceptions."""

from __future__ import annotations

import asyncio

from django_rivet.engine import (
    CriticalError,
    JoinError,
    RollbackError,
    StepResult,
    StepTimeoutError,
    run_workflow,
)

from .helpers import drive, execute, raising, sleep_through_retries


def fail(error):
    def run():
        raise error

    return run


async def test_try_step_returns_values(clock, driver, mode):
    async def wf(ctx, _):
        result = await ctx.try_step("ok", lambda: 42)
        return [result.ok, result.value, result.failure]

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == [True, 42, None]


async def test_try_step_reports_critical_failures(clock, driver, mode):
    async def wf(ctx, _):
        result = await ctx.try_step("bad", fail(CriticalError("invalid")))
        after = await ctx.step("after", lambda: "ok")
        failure = result.failure
        return [result.ok, failure.kind, failure.name, failure.attempts, after]

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == [False, "critical", "bad", 1, "ok"]


async def test_try_step_reports_exhaustion_and_replays_it(clock, driver, mode):
    calls = []
    flaky = raising(calls, RuntimeError, "down")

    async def wf(ctx, _):
        result = await ctx.try_step("s", flaky, max_retries=2, retry_backoff_base=1)
        return [result.failure.kind, result.failure.attempts, str(result.failure.error)]

    if mode == "yield":  # retries still pause the workflow
        await sleep_through_retries(clock, "wf-1", wf, driver, 2)
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output[:2] == ["exhausted", 3]  # max_retries=2: 3 runs
    assert "down" in outcome.output[2]
    assert (await execute(clock, "wf-1", wf, driver, mode)).output == outcome.output
    assert len(calls) == 3


async def test_try_step_reports_timeouts(clock, driver, mode):
    async def wf(ctx, _):
        result = await ctx.try_step("slow", asyncio.Event().wait, timeout=1)
        return [result.failure.kind, isinstance(result.failure.error, StepTimeoutError)]

    outcome = await drive(clock, run_workflow("wf-1", wf, None, driver, mode))
    assert outcome.output == ["timeout", True]


async def test_try_step_lets_rollback_errors_through(clock, driver, mode):
    async def wf(ctx, _):
        await ctx.try_step("halt", fail(RollbackError("roll back")))
        return "unreachable"

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert isinstance(outcome.error, RollbackError)


async def test_try_block_catches_step_and_join_failures(clock, driver, mode):
    async def block(ctx):
        await ctx.step("fine", lambda: 1)
        await ctx.join("j", {"bad": lambda c: c.step("s", fail(CriticalError("x")))})
        return "unreachable"

    async def wf(ctx, _):
        result = await ctx.try_block("block", block)
        after = await ctx.step("after", lambda: "after")
        return [result.ok, result.failure.kind, result.failure.name, after]

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == [False, "join", "block", "after"]
    assert (await execute(clock, "wf-1", wf, driver, mode)).output == outcome.output


async def test_try_block_returns_the_block_value(clock, driver, mode):
    async def wf(ctx, _):
        result = await ctx.try_block("block", lambda c: c.step("s", lambda: 5))
        return [result.ok, result.value]

    assert (await execute(clock, "wf-1", wf, driver, mode)).output == [True, 5]


async def test_try_block_does_not_catch_plain_errors_by_default(clock, driver, mode):
    async def block(ctx):
        raise KeyError("bug")

    async def wf(ctx, _):
        await ctx.try_block("block", block)

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert isinstance(outcome.error, KeyError)


async def test_try_block_catch_narrows_kinds_and_accepts_classes(clock, driver):
    async def critical(ctx):
        await ctx.step("s", fail(CriticalError("x")))

    async def bug(ctx):
        raise KeyError("bug")

    async def wf(ctx, _):
        caught = await ctx.try_block("by-class", bug, catch=[KeyError])
        try:
            await ctx.try_block("narrow", critical, catch=["join"])
        except CriticalError:
            return [caught.failure.kind, "not caught"]
        return "caught"

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.output == ["error", "not caught"]


async def test_try_results_are_step_results(clock, driver):
    async def wf(ctx, _):
        result = await ctx.try_step("s", lambda: 1)
        assert isinstance(result, StepResult)
        block = await ctx.try_block("b", lambda c: _raise(JoinError("j", {})))
        assert isinstance(block, StepResult) and block.failure.kind == "join"
        return "ok"

    assert (await run_workflow("wf-1", wf, None, driver)).output == "ok"


async def _raise(error):
    raise error
