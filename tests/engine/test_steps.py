"""ctx.step: replay, retries with backoff alarms, critical errors, timeouts."""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

from django_rivet.engine import (
    CriticalError,
    EntryInProgressError,
    HistoryDivergedError,
    RollbackError,
    StepExhaustedError,
    StepOutputError,
    StepTimeoutError,
    StorageError,
    read_history,
    recover_workflow,
    run_workflow,
)

from .conftest import START
from .helpers import (
    RecordingDriver,
    drive,
    execute,
    raising,
    run_to_end,
    sleep_through_retries,
)


async def test_simple_step_completes(clock, driver, mode):
    async def wf(ctx, _):
        return await ctx.step("my-step", lambda: "hello world")

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "completed"
    assert outcome.output == "hello world"
    assert outcome.error is None and outcome.sleep_until is None


async def test_completed_step_is_replayed_not_rerun(clock, driver, mode):
    calls = []

    async def wf(ctx, _):
        value = await ctx.step("once", lambda: calls.append(1) or "v")
        nothing = await ctx.step("void", lambda: calls.append(2))
        return [value, nothing]

    first = await execute(clock, "wf-1", wf, driver, mode)
    second = await execute(clock, "wf-1", wf, driver, mode)
    assert first.output == second.output == ["v", None]
    assert calls == [1, 2]


async def test_steps_run_in_sequence_sync_and_async(clock, driver, mode):
    async def two():
        await asyncio.sleep(0)
        return 2

    async def wf(ctx, _):
        a = await ctx.step("a", lambda: 1)
        b = await ctx.step("b", two)
        c = await ctx.step("c", lambda: two())  # returns an awaitable
        return a + b + c

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == 5


async def test_failed_steps_are_retried_until_they_succeed(clock, driver, mode):
    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("transient")
        return "success"

    async def wf(ctx, _):
        return await ctx.step("flaky", flaky, max_retries=3, retry_backoff_base=1)

    if mode == "yield":
        for _ in range(2):
            outcome = await run_workflow("wf-1", wf, None, driver)
            assert outcome.state == "sleeping"
            clock.set(outcome.sleep_until)
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "completed"
    assert outcome.output == "success"
    assert len(attempts) == 3


async def test_backoff_yields_and_keeps_the_alarm(clock, driver):
    attempts = []
    always_fails = raising(attempts, RuntimeError, "failure")

    async def wf(ctx, _):
        return await ctx.step(
            "always-fails",
            always_fails,
            retry_backoff_base=50,
            retry_backoff_max=100,
        )

    first = await run_workflow("wf-1", wf, None, driver)
    assert first.state == "sleeping"
    assert first.sleep_until == START + 100  # min(100, 50 * 2**1)
    second = await run_workflow("wf-1", wf, None, driver)
    assert second.state == "sleeping"
    assert second.sleep_until == first.sleep_until
    assert driver.get_alarm("wf-1") == second.sleep_until
    assert len(attempts) == 1


async def test_backoff_doubles_up_to_the_maximum(clock, driver):
    async def wf(ctx, _):
        def fail():
            raise RuntimeError("no")

        return await ctx.step(
            "s", fail, max_retries=6, retry_backoff_base=1, retry_backoff_max=10
        )

    delays = []
    for _ in range(6):  # max_retries=6: retries after attempts 1 to 6
        before = clock.now()
        outcome = await run_workflow("wf-1", wf, None, driver)
        assert outcome.state == "sleeping"
        delays.append(outcome.sleep_until - before)
        assert driver.get_alarm("wf-1") == outcome.sleep_until
        clock.set(outcome.sleep_until)
    assert delays == [2, 4, 8, 10, 10, 10]
    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, StepExhaustedError)


async def test_live_mode_retries_in_process_until_exhausted(clock, driver):
    attempts = []

    def always_fails():
        attempts.append(clock.now())
        raise RuntimeError("failure")

    async def wf(ctx, _):
        return await ctx.step(
            "s", always_fails, retry_backoff_base=50, retry_backoff_max=1000
        )

    outcome = await drive(clock, run_workflow("wf-1", wf, None, driver, "live"))
    assert outcome.state == "failed"
    assert isinstance(outcome.error, StepExhaustedError)
    # max_retries=3 (the default) counts retries: 4 runs, backoff 100, 200, 400.
    assert [t - START for t in attempts] == [0, 100, 300, 700]


async def fails_alike_on_replay(clock, driver, mode, wf, error_class, attempts, runs):
    """Run ``wf``: it fails with ``error_class`` after ``runs`` step attempts, and
    a replay reports the same failure without running the step again."""
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, error_class)
    assert len(attempts) == runs
    again = await execute(clock, "wf-1", wf, driver, mode)
    assert again.state == "failed"
    assert isinstance(again.error, error_class)
    assert len(attempts) == runs
    return outcome


@pytest.mark.parametrize("error_class", [CriticalError, RollbackError])
async def test_critical_and_rollback_errors_are_never_retried(
    clock, driver, mode, error_class
):
    attempts = []
    fail = raising(attempts, error_class, "unrecoverable")

    async def wf(ctx, _):
        return await ctx.step("critical", fail)

    await fails_alike_on_replay(clock, driver, mode, wf, error_class, attempts, 1)


async def test_max_retries_counts_retries_after_the_first_attempt(clock, driver, mode):
    attempts = []
    fail = raising(attempts, RuntimeError, "always fails")

    async def wf(ctx, _):
        return await ctx.step("s", fail, max_retries=2, retry_backoff_base=1)

    if mode == "yield":  # two retries, each after a backoff
        await sleep_through_retries(clock, "wf-1", wf, driver, 2)
    # max_retries=2: up to 3 runs.
    outcome = await fails_alike_on_replay(
        clock, driver, mode, wf, StepExhaustedError, attempts, 3
    )
    assert "always fails" in str(outcome.error)


def failing_once(attempts):
    """A workflow of one step that always fails and is not retried."""
    fail = raising(attempts, RuntimeError, "always fails")

    async def wf(ctx, _):
        return await ctx.step("s", fail, max_retries=0)

    return wf


async def test_max_retries_zero_runs_a_step_once(clock, driver, mode):
    attempts = []
    wf = failing_once(attempts)
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, StepExhaustedError)
    assert len(attempts) == 1


async def test_failed_attempts_record_the_error_but_no_output(clock, driver):
    def fail():
        raise ValueError("bad input")

    async def wf(ctx, _):
        return await ctx.step("s", fail, retry_backoff_base=1)

    await run_workflow("wf-1", wf, None, driver)
    [entry] = await read_history(driver)
    assert entry.kind == "step"
    assert entry.status == "failed"
    assert entry.attempts == 1
    assert entry.output is None
    assert "output" not in entry.data
    assert entry.error["name"] == "ValueError"
    assert entry.error["message"] == "bad input"


async def test_recover_resets_exhausted_steps(clock, driver, mode):
    attempts = []
    wf = failing_once(attempts)
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "failed"
    assert await recover_workflow("wf-1", driver)
    assert driver.get_alarm("wf-1") == clock.now()
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "failed"
    assert len(attempts) == 2
    assert not await recover_workflow("wf-missing", RecordingDriver())


async def test_steps_that_exceed_their_timeout_fail_critically(clock, driver, mode):
    never = asyncio.Event()
    attempts = []

    async def slow():
        attempts.append(1)
        await never.wait()

    async def wf(ctx, _):
        return await ctx.step("slow", slow, timeout=5)

    outcome = await drive(clock, run_workflow("wf-1", wf, None, driver, mode))
    assert outcome.state == "failed"
    assert isinstance(outcome.error, StepTimeoutError)
    assert isinstance(outcome.error, CriticalError)
    assert len(attempts) == 1
    assert clock.now() == START + 5


async def test_retry_on_timeout_retries_timed_out_steps(clock, driver):
    attempts = []

    async def slow_then_fast():
        attempts.append(1)
        if len(attempts) == 1:
            await asyncio.Event().wait()
        return "ok"

    async def wf(ctx, _):
        return await ctx.step(
            "s", slow_then_fast, timeout=5, retry_on_timeout=True, retry_backoff_base=1
        )

    outcome = await drive(clock, run_workflow("wf-1", wf, None, driver, "live"))
    assert outcome.state == "completed"
    assert outcome.output == "ok"
    assert len(attempts) == 2


async def test_retry_on_timeout_gives_max_retries_more_runs(clock, driver, mode):
    attempts = []

    async def hangs():
        attempts.append(clock.now())
        await asyncio.Event().wait()

    async def wf(ctx, _):
        return await ctx.step(
            "s", hangs, timeout=5, retry_on_timeout=True, max_retries=2,
            retry_backoff_base=1,
        )  # fmt: skip

    if mode == "live":
        outcome = await drive(clock, run_workflow("wf-1", wf, None, driver, "live"))
    else:
        outcome = await drive(clock, run_to_end(clock, "wf-1", wf, driver, mode))
    assert outcome.state == "failed"
    assert isinstance(outcome.error, StepExhaustedError)
    # max_retries=2: three runs, each cut off after 5 s (the backoffs of 2
    # and 4 s from each attempt's start are over by then).
    assert [t - START for t in attempts] == [0, 5, 10]


async def test_a_step_started_without_await_fails_the_next_entry(clock, driver, mode):
    async def wf(ctx, _):
        ctx.step("step-a", lambda: "a")  # missing await
        return await ctx.step("step-b", lambda: "b")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = await execute(clock, "wf-1", wf, driver, mode)
        gc.collect()
    assert outcome.state == "failed"
    assert isinstance(outcome.error, EntryInProgressError)
    assert not [w for w in caught if "never awaited" in str(w.message)]


async def test_a_trailing_step_without_await_fails_the_workflow(clock, driver):
    async def wf(ctx, _):
        ctx.step("forgotten", lambda: "a")
        return "done"

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, EntryInProgressError)


async def test_gathering_two_steps_in_one_context_is_refused(clock, driver, mode):
    async def wf(ctx, _):
        return await asyncio.gather(ctx.step("a", lambda: 1), ctx.step("b", lambda: 2))

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert isinstance(outcome.error, EntryInProgressError)


async def test_duplicate_entry_names_diverge(clock, driver, mode):
    async def wf(ctx, _):
        await ctx.step("dup", lambda: "first")
        await ctx.step("dup", lambda: "second")
        return "done"

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, HistoryDivergedError)
    assert "dup" in str(outcome.error)


async def test_a_different_kind_at_a_recorded_location_diverges(clock, driver, mode):
    async def as_step(ctx, _):
        return await ctx.step("thing", lambda: 1)

    async def as_sleep(ctx, _):
        await ctx.sleep("thing", 0)
        return 2

    await execute(clock, "wf-1", as_step, driver, mode)
    outcome = await execute(clock, "wf-1", as_sleep, driver, mode)
    assert isinstance(outcome.error, HistoryDivergedError)
    assert "step" in str(outcome.error) and "sleep" in str(outcome.error)


async def test_ephemeral_steps_ride_along_with_the_next_flush(clock, mode):
    driver = RecordingDriver()

    async def wf(ctx, _):
        await ctx.step("ephemeral-a", lambda: "a", ephemeral=True)
        await ctx.step("ephemeral-b", lambda: "b", ephemeral=True)
        return await ctx.step("durable", lambda: "done")

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == "done"
    assert len(driver.batches) == 2
    history = await read_history(driver)
    assert [h.location for h in history] == ["ephemeral-a", "ephemeral-b", "durable"]


@pytest.mark.parametrize("output", [{1, 2}, object()], ids=["set", "object"])
async def test_unstorable_outputs_fail_the_step_without_retry(clock, driver, output):
    runs = []

    async def wf(ctx, _):
        return await ctx.step("bad", lambda: runs.append(1) or output)

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, StepOutputError)
    assert runs == [1]
    [entry] = await read_history(driver)
    assert entry.status == "exhausted" and "output" not in entry.data


async def test_outputs_are_returned_as_a_replay_will_see_them(clock, driver):
    async def wf(ctx, _):
        value = await ctx.step("tuple", lambda: (1, (2, 3)))
        assert value == [1, [2, 3]]
        return value

    first = await run_workflow("wf-1", wf, None, driver)
    second = await run_workflow("wf-1", wf, None, driver)
    assert first.output == second.output == [1, [2, 3]]


async def test_a_storage_outage_propagates_instead_of_failing_the_workflow(clock):
    class Flaky(RecordingDriver):
        down = False

        async def batch(self, writes):
            if self.down:
                raise OSError("database is down")
            await super().batch(writes)

    driver = Flaky()
    calls = []

    async def wf(ctx, _):
        await ctx.step("one", lambda: calls.append("one"))
        return await ctx.step("two", lambda: calls.append("two") or "done")

    driver.down = True
    with pytest.raises(StorageError):
        await run_workflow("wf-1", wf, None, driver)
    assert driver.kv == {}
    driver.down = False
    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.output == "done"
    assert calls == ["one", "one", "two"]  # the unacknowledged step ran again


def test_steps_with_the_same_options_share_them_and_handlers_are_not_kept():
    from django_rivet.engine.steps import StepOptions, step_options

    defaults = (3, 0.1, 30, 30, False, None, False, False)
    assert step_options(*defaults) is step_options(*defaults)
    assert step_options(*defaults) == StepOptions()
    assert step_options(5, 0.1, 30, 30, False, None, False, False).max_retries == 5

    def undo(output):
        return None

    with_handler = (3, 0.1, 30, 30, False, undo, False, False)
    assert step_options(*with_handler).rollback is undo
    assert step_options(*with_handler) is not step_options(*with_handler)
    unhashable = step_options(3, 0.1, 30, [30], False, None, False, False)
    assert unhashable.timeout == [30]
