"""Rollback: handlers of completed steps run newest first, resumably."""

from __future__ import annotations

import asyncio

from django_rivet.engine import (
    Loop,
    RollbackCheckpointError,
    RollbackError,
    RollbackErrorEvent,
    read_history,
    read_workflow,
    run_workflow,
    start_workflow,
)
from django_rivet.engine.storage import Storage

from .helpers import execute


def recorder(log, name):
    async def rollback(ctx, output):
        log.append(f"{name}:{output}")

    return rollback


async def test_rollbacks_run_in_reverse_order_after_a_failure(clock, driver, mode):
    log = []

    async def wf(ctx, _):
        await ctx.rollback_checkpoint("checkpoint")
        await ctx.step("first", lambda: "one", rollback=recorder(log, "first"))
        await ctx.step("second", lambda: "two", rollback=recorder(log, "second"))
        raise RuntimeError("boom")

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "failed"
    assert str(outcome.error) == "boom"
    assert log == ["second:two", "first:one"]
    assert (await read_workflow(driver)).state == "failed"
    assert all(
        h.rollback_completed_at for h in await read_history(driver) if h.kind == "step"
    )
    # A replay of the failed workflow does not roll back twice.
    again = await execute(clock, "wf-1", wf, driver, mode)
    assert again.state == "failed"
    assert log == ["second:two", "first:one"]


async def test_a_rollback_handler_without_a_checkpoint_is_refused(clock, driver, mode):
    async def wf(ctx, _):
        return await ctx.step("s", lambda: "value", rollback=recorder([], "s"))

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, RollbackCheckpointError)


async def test_rollback_resumes_after_an_eviction(clock, driver, mode):
    log = []
    started = asyncio.Event()
    gate = asyncio.Event()

    async def slow_rollback(ctx, output):
        started.set()
        await gate.wait()
        log.append("second")

    async def wf(ctx, _):
        await ctx.rollback_checkpoint("checkpoint")
        await ctx.step("first", lambda: 1, rollback=lambda c, o: log.append("first"))
        await ctx.step("second", lambda: 2, rollback=slow_rollback)
        await ctx.step("third", lambda: 3, rollback=lambda c, o: log.append("third"))
        raise RuntimeError("boom")

    run = start_workflow("wf-1", wf, None, driver, mode)
    await started.wait()
    run.evict()
    outcome = await run
    assert outcome.state == "rolling_back"
    assert log == ["third"]
    assert (await read_workflow(driver)).state == "rolling_back"
    gate.set()
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "failed"
    assert str(outcome.error) == "boom"
    assert log == ["third", "second", "first"]


async def test_a_failing_rollback_handler_is_retried_on_the_next_run(
    clock, driver, mode
):
    log = []
    events = []
    fail = [True]

    def flaky_rollback(ctx, output):
        if fail[0]:
            fail[0] = False
            raise OSError("refund service down")
        log.append("second")

    async def wf(ctx, _):
        await ctx.rollback_checkpoint("checkpoint")
        await ctx.step("first", lambda: 1, rollback=lambda c, o: log.append("first"))
        await ctx.step("second", lambda: 2, rollback=flaky_rollback)
        raise RuntimeError("boom")

    outcome = await execute(clock, "wf-1", wf, driver, mode, on_error=events.append)
    assert outcome.state == "rolling_back"
    assert isinstance(outcome.error, OSError)
    [event] = [e for e in events if isinstance(e, RollbackErrorEvent)]
    assert event.step_name == "second" and isinstance(event.error, OSError)
    second = next(h for h in await read_history(driver) if h.location == "second")
    assert second.rollback_error == "refund service down"
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "failed"
    assert log == ["second", "first"]


async def test_rollback_error_from_a_step_rolls_back(clock, driver, mode):
    log = []

    def halt():
        raise RollbackError("stop and roll back")

    async def wf(ctx, _):
        await ctx.rollback_checkpoint("checkpoint")
        await ctx.step("charge", lambda: "c-1", rollback=recorder(log, "refund"))
        await ctx.step("halt", halt)
        return "unreachable"

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert isinstance(outcome.error, RollbackError)
    assert log == ["refund:c-1"]


async def test_only_completed_steps_are_rolled_back(clock, driver):
    log = []

    def fail():
        raise RuntimeError("nope")

    async def wf(ctx, _):
        await ctx.rollback_checkpoint("checkpoint")
        await ctx.step("ok", lambda: 1, rollback=recorder(log, "ok"))
        await ctx.step("bad", fail, max_retries=0, rollback=recorder(log, "bad"))

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "failed"
    assert log == ["ok:1"]


async def test_rollback_replay_does_not_persist_loop_progress(clock, driver, mode):
    log = []
    should_fail = [True]

    async def body(ctx, state):
        await ctx.step(f"step-{state}", lambda: state, rollback=recorder(log, "loop"))
        if state == 0:
            return Loop.continue_(1)
        if should_fail[0]:
            should_fail[0] = False
            raise RuntimeError("boom")
        return Loop.continue_(2)

    async def wf(ctx, _):
        await ctx.rollback_checkpoint("checkpoint")
        await ctx.step("outside", lambda: "o", rollback=recorder(log, "outside"))
        await ctx.loop("loop", body, state=0, history_prune_interval=1)

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert str(outcome.error) == "boom"
    storage = await Storage.load(driver)
    [loop] = [e for e in storage.entries.values() if e.kind == "loop"]
    assert loop.data["iteration"] == 1
    assert "outside:o" in log
    assert log[0] == "loop:1"


async def test_rollbacks_inside_join_branches_run_newest_first(clock, driver):
    log = []

    async def branch(ctx, name):
        return await ctx.step("s", lambda: name, rollback=recorder(log, name))

    async def wf(ctx, _):
        await ctx.rollback_checkpoint("checkpoint")
        await ctx.step("before", lambda: 0, rollback=recorder(log, "before"))
        await ctx.join(
            "j", {"a": lambda c: branch(c, "a"), "b": lambda c: branch(c, "b")}
        )
        await ctx.step("after", lambda: 9, rollback=recorder(log, "after"))
        raise RuntimeError("boom")

    await run_workflow("wf-1", wf, None, driver)
    assert log == ["after:9", "b:b", "a:a", "before:0"]


async def test_steps_of_an_unfinished_race_are_rolled_back(clock, driver):
    log = []

    async def doomed(ctx):
        await ctx.step("reserve", lambda: "r-1", rollback=recorder(log, "release"))
        await ctx.step("fail", _boom, max_retries=0)

    async def wf(ctx, _):
        await ctx.rollback_checkpoint("checkpoint")
        await ctx.race("r", {"only": doomed})

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "failed"
    assert log == ["release:r-1"]


def _boom():
    raise RuntimeError("boom")


async def test_sync_rollback_handlers_run_through_the_drivers_call_sync(clock):
    from django_rivet.engine import InMemoryDriver

    class Host(InMemoryDriver):
        def __init__(self):
            super().__init__()
            self.sync_calls = []

        async def call_sync(self, fn):
            self.sync_calls.append(fn)
            return fn()

    log = []

    def refund(ctx, output):  # sync: blocking I/O must stay off the event loop
        log.append(f"refund:{output}")

    async def wf(ctx, _):
        await ctx.rollback_checkpoint("checkpoint")
        await ctx.step("charge", lambda: "ch_1", rollback=refund)
        raise RollbackError("declined")

    driver = Host()
    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "failed"
    assert log == ["refund:ch_1"]
    # One call for the sync step function, one for the handler.
    assert len(driver.sync_calls) == 2
