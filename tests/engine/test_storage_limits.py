"""Oversized values fail the workflow in one run, with ``workflow/storage_limit``.

Every value the engine stores is measured when it is recorded (one record,
key plus value, is at most ``MAX_KV_BATCH_PAYLOAD_BYTES``); over the limit
the workflow fails at once -- outcome ``failed``, error ``StorageLimitError``
naming what was too big and the limit -- instead of raising out of the run
and being retried forever (issue 11 item 2). Message bodies are refused when
sent. A driver refusing a whole flush as too large fails the step whose
writes it was, once, as critical (issue 16 item 3).
"""

from __future__ import annotations

import pytest

from django_rivet.engine import (
    MAX_KV_BATCH_PAYLOAD_BYTES,
    MAX_MESSAGE_BODY_BYTES,
    CriticalError,
    InMemoryDriver,
    Loop,
    StepErrorEvent,
    StorageLimitError,
    keys,
    read_history,
    read_workflow,
    run_workflow,
    start_workflow,
)
from django_rivet.engine.errors import MAX_ERROR_MESSAGE_CHARS

from .helpers import execute, run_to_end

HUGE = "x" * (MAX_KV_BATCH_PAYLOAD_BYTES + 1)
HALF = "y" * (MAX_KV_BATCH_PAYLOAD_BYTES // 2 + 1024)


def assert_storage_limit(outcome, what):
    assert outcome.state == "failed"
    error = outcome.error
    assert isinstance(error, StorageLimitError)
    assert error.qualified_code == "workflow/storage_limit"
    assert what in str(error)
    assert f"{MAX_KV_BATCH_PAYLOAD_BYTES} byte limit" in str(error)


async def test_an_oversized_step_output_fails_the_step_critically(clock, driver, mode):
    runs = []

    async def wf(ctx, _):
        return await ctx.step("big", lambda: runs.append(1) or HUGE)

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert_storage_limit(outcome, 'Output of step "big"')
    assert runs == [1]  # critical: not retried
    [entry] = await read_history(driver)
    assert entry.status == "exhausted" and "output" not in entry.data
    assert (await read_workflow(driver)).state == "failed"
    again = await execute(clock, "wf-1", wf, driver, mode)
    assert_storage_limit(again, 'Output of step "big"')
    assert runs == [1]


@pytest.mark.parametrize("where", ["initial", "continue"])
async def test_an_oversized_loop_state_fails_the_workflow(clock, driver, mode, where):
    async def body(ctx, state):
        await ctx.step("tick", lambda: 1)
        return Loop.continue_(HUGE)

    async def wf(ctx, _):
        start = HUGE if where == "initial" else 0
        return await ctx.loop("l", body, state=start)

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert_storage_limit(outcome, 'State of loop "l"')
    # The failure itself was stored: a later run reports it again, at once.
    assert (await read_workflow(driver)).state == "failed"


async def test_an_oversized_loop_output_fails_the_workflow(clock, driver, mode):
    async def body(ctx, state):
        return Loop.break_(HUGE)

    async def wf(ctx, _):
        return await ctx.loop("l", body)

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert_storage_limit(outcome, 'Loop "l"')


async def test_join_results_too_large_together_fail_the_workflow(clock, driver, mode):
    async def wf(ctx, _):
        return await ctx.join("j", {"a": lambda c: HALF, "b": lambda c: HALF})

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert_storage_limit(outcome, 'Results of join "j"')


async def test_an_oversized_race_result_fails_the_workflow(clock, driver, mode):
    async def wf(ctx, _):
        return await ctx.race("r", {"a": lambda c: HUGE})

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert_storage_limit(outcome, 'Result of race "r"')


async def test_an_oversized_input_fails_the_workflow(clock, driver, mode):
    async def wf(ctx, input):
        return len(input)

    outcome = await execute(clock, "wf-1", wf, driver, mode, HUGE)
    assert_storage_limit(outcome, "Workflow input")
    assert (await read_workflow(driver)).input is None


async def test_an_oversized_output_fails_the_workflow(clock, driver, mode):
    async def wf(ctx, _):
        await ctx.step("fine", lambda: 1)
        return HUGE

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert_storage_limit(outcome, "Workflow output")
    snapshot = await read_workflow(driver)
    assert snapshot.state == "failed" and snapshot.output is None


async def test_an_oversized_message_is_refused_at_send(clock, driver):
    async def wf(ctx, _):
        return (await ctx.messages.next("m")).body

    run = start_workflow("wf-1", wf, None, driver, "live")
    await run.send("small", "hello")  # fine
    with pytest.raises(StorageLimitError) as refused:
        await run.send("big", "z" * (MAX_MESSAGE_BODY_BYTES + 1))
    assert refused.value.qualified_code == "workflow/storage_limit"
    assert f"{MAX_MESSAGE_BODY_BYTES} byte limit" in str(refused.value)
    with pytest.raises(StorageLimitError):
        await driver.add_message("big", b"z" * (MAX_MESSAGE_BODY_BYTES + 1))
    assert [m.name for m in driver.messages] == ["small"]
    assert (await run).output == "hello"


async def test_a_message_at_the_send_limit_can_be_received(clock, driver, mode):
    body = "m" * (MAX_MESSAGE_BODY_BYTES - 16)

    async def wf(ctx, _):
        return len((await ctx.messages.next("m")).body)

    await driver.add_message("m", body)
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == len(body)


async def test_a_batch_too_large_for_one_record_is_received_in_parts(
    clock, driver, mode
):
    for index in range(3):
        await driver.add_message("part", f"{index}" * (MAX_MESSAGE_BODY_BYTES // 2))

    async def wf(ctx, _):
        got = []
        while len(got) < 3:
            batch = await ctx.messages.next_batch(f"take-{len(got)}", count=3)
            got += [m.body[0] for m in batch]
        return got

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "completed" and outcome.output == ["0", "1", "2"]
    sizes = [len(h.output) for h in await read_history(driver)]
    assert sizes == [2, 1]  # one record had room for two of them, not three
    assert driver.messages == []


async def test_a_huge_error_message_is_cut_and_the_failure_stored(clock, driver):
    def fail():
        raise CriticalError("e" * (2 * MAX_KV_BATCH_PAYLOAD_BYTES))

    async def wf(ctx, _):
        return await ctx.step("s", fail)

    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "failed" and isinstance(outcome.error, CriticalError)
    stored = (await read_workflow(driver)).error
    assert len(stored["message"]) < MAX_ERROR_MESSAGE_CHARS + 100
    assert stored["message"].endswith("[truncated]")


# --- a driver refusing a step's writes (issue 16 item 3) -----------------------


class SmallUnits(InMemoryDriver):
    """An atomic driver taking at most ``limit`` bytes per flush, as RivetKit's."""

    atomic_batch = True

    def __init__(self, limit: int = 4096) -> None:
        super().__init__()
        self.limit = limit
        self.refused = 0

    def _check(self, writes):
        size = sum(len(k) + len(v) for k, v in writes)
        if size > self.limit:
            self.refused += 1
            raise StorageLimitError(f"unit of {size} bytes over {self.limit}")

    async def atomic_flush(self, writes, deletions):
        self._check(writes)
        await super().atomic_flush(writes, deletions)

    async def run_transactional(self, fn, make_writes):
        output = await super().run_transactional(fn, lambda out: [])
        # What a database does: the writes are checked in the transaction.
        writes = make_writes(output)
        self._check(writes)
        await self.batch(writes)
        return output


@pytest.mark.parametrize("transaction", [False, True], ids=["plain", "transaction"])
async def test_a_step_whose_writes_the_driver_refuses_fails_once_as_critical(
    clock, mode, transaction
):
    driver = SmallUnits()
    events = []
    effects = []

    def big():
        effects.append(1)
        return "b" * 8000  # fits a record, not the driver's unit

    async def wf(ctx, _):
        await ctx.step("small", lambda: "fine")
        return await ctx.step("big", big, transaction=transaction)

    outcome = await run_to_end(clock, "wf-1", wf, driver, mode, on_error=events.append)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, StorageLimitError)
    # The driver's own error does not say which step: the engine's does.
    assert str(outcome.error).startswith('Step "big": the driver refused')
    assert "over 4096" in str(outcome.error)
    assert effects == [1]  # not retried, side effect not re-run
    [event] = events  # one step event, no workflow event
    assert isinstance(event, StepErrorEvent) and event.step_name == "big"
    assert not event.will_retry and event.attempt == 1
    small, step = await read_history(driver)
    assert small.status == "completed"
    assert step.status == "exhausted" and "output" not in step.data
    assert step.error["kind"] == "critical"
    assert step.error["name"] == "StorageLimitError"
    assert step.error["message"].startswith('Step "big"')
    again = await execute(clock, "wf-1", wf, driver, mode, on_error=events.append)
    assert again.state == "failed" and effects == [1] and len(events) == 1


async def test_try_step_reports_a_refused_step_as_a_critical_failure(clock, mode):
    driver = SmallUnits()
    effects = []

    def big():
        effects.append(1)
        return "b" * 8000

    async def wf(ctx, _):
        result = await ctx.try_step("big", big)
        after = await ctx.step("after", lambda: "went on")
        return [result.ok, result.failure.kind, after]

    outcome = await run_to_end(clock, "wf-1", wf, driver, mode)
    assert outcome.output == [False, "critical", "went on"]
    assert effects == [1]


async def test_a_flush_refused_even_without_the_step_still_records_the_failure(
    clock, mode
):
    driver = SmallUnits(limit=6000)

    async def wf(ctx, _):
        for index in range(3):  # pending together: 7.5 KB, over the unit
            await ctx.step(f"e{index}", lambda: "e" * 2500, ephemeral=True)
        return await ctx.step("last", lambda: "l")

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, StorageLimitError)
    # Only the workflow fields could be written: failed, with the error.
    snapshot = await read_workflow(driver)
    assert snapshot.state == "failed"
    assert snapshot.error["name"] == "StorageLimitError"
    assert keys.workflow_key(keys.WORKFLOW_ERROR) in driver.kv
