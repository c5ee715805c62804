"""The on_error hook: step, rollback and workflow failures, each once."""

from __future__ import annotations

from django_rivet.engine import (
    CriticalError,
    JoinError,
    StepErrorEvent,
    StepExhaustedError,
    WorkflowErrorEvent,
    run_workflow,
)

from .conftest import START
from .helpers import execute, run_to_end


async def test_each_attempt_is_reported_and_the_failure_only_once(clock, driver, mode):
    events = []

    def fail():
        raise RuntimeError("down")

    async def wf(ctx, _):
        return await ctx.step(
            "call", fail, max_retries=3, retry_backoff_base=1, retry_backoff_max=10
        )

    outcome = await run_to_end(clock, "wf-1", wf, driver, mode, on_error=events.append)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, StepExhaustedError)
    # max_retries=3 counts retries: 4 runs, remaining_retries == max_retries
    # after the first failure (RivetKit's engine).
    assert [
        (e.attempt, e.remaining_retries, e.will_retry, e.retry_delay) for e in events
    ] == [(1, 3, True, 2), (2, 2, True, 4), (3, 1, True, 8), (4, 0, False, None)]
    assert [e.retry_at for e in events] == [START + 2, START + 6, START + 14, None]
    assert all(isinstance(e, StepErrorEvent) for e in events)
    assert all(e.max_retries == 3 and e.step_name == "call" for e in events)
    assert all(str(e.error) == "down" for e in events)
    # The terminal failure is the step's event alone: no second, workflow-level
    # event for the same error. Replaying the failed workflow reports nothing.
    events.clear()
    await execute(clock, "wf-1", wf, driver, mode, on_error=events.append)
    assert events == []


async def test_a_critical_failure_is_reported_once(clock, driver, mode):
    events = []

    def fail():
        raise CriticalError("invalid")

    async def wf(ctx, _):
        return await ctx.step("validate", fail)

    outcome = await execute(clock, "wf-1", wf, driver, mode, on_error=events.append)
    assert isinstance(outcome.error, CriticalError)
    [step] = events
    assert isinstance(step, StepErrorEvent)
    assert (step.attempt, step.will_retry, step.remaining_retries) == (1, False, 0)


async def test_a_plain_exception_in_workflow_code_is_one_workflow_event(
    clock, driver, mode
):
    events = []

    async def wf(ctx, _):
        await ctx.step("fine", lambda: 1)
        raise ValueError("workflow bug")

    outcome = await execute(clock, "wf-1", wf, driver, mode, on_error=events.append)
    assert outcome.state == "failed"
    [failure] = events
    assert isinstance(failure, WorkflowErrorEvent)
    assert isinstance(failure.error, ValueError) and failure.workflow_id == "wf-1"


async def test_a_join_failing_on_a_step_reports_the_step_and_the_join(clock, driver):
    events = []

    def boom():
        raise CriticalError("branch down")

    async def wf(ctx, _):
        return await ctx.join("j", {"a": lambda c: c.step("s", boom)})

    await run_workflow("wf-1", wf, None, driver, on_error=events.append)
    step, workflow = events
    assert isinstance(step, StepErrorEvent) and step.step_name == "s"
    assert isinstance(workflow, WorkflowErrorEvent)
    assert isinstance(workflow.error, JoinError)


async def test_async_hooks_are_awaited_and_failing_hooks_are_ignored(clock, driver):
    seen = []

    async def hook(event):
        seen.append(type(event).__name__)
        raise RuntimeError("hook bug")

    async def wf(ctx, _):
        raise ValueError("workflow bug")

    outcome = await run_workflow("wf-1", wf, None, driver, on_error=hook)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, ValueError)
    assert seen == ["WorkflowErrorEvent"]
