"""The on_error hook: step, rollback and workflow failures, each once."""

from __future__ import annotations

from django_rivet.workflow import (
    CriticalError,
    StepErrorEvent,
    StepExhaustedError,
    WorkflowErrorEvent,
    run_workflow,
)

from .conftest import START
from .helpers import drive


async def test_each_failed_attempt_and_the_failure_are_reported_once(clock, driver):
    events = []

    def fail():
        raise RuntimeError("down")

    async def wf(ctx, _):
        return await ctx.step(
            "call", fail, max_retries=3, retry_backoff_base=1, retry_backoff_max=10
        )

    outcome = await drive(
        clock, run_workflow("wf-1", wf, None, driver, "live", events.append)
    )
    assert outcome.state == "failed"
    steps = [e for e in events if isinstance(e, StepErrorEvent)]
    assert [
        (e.attempt, e.remaining_retries, e.will_retry, e.retry_delay) for e in steps
    ] == [(1, 2, True, 2), (2, 1, True, 4), (3, 0, False, None)]
    assert steps[0].retry_at == START + 2
    assert steps[1].retry_at == START + 2 + 4
    assert steps[-1].retry_at is None
    assert all(e.max_retries == 3 and e.step_name == "call" for e in steps)
    assert all(str(e.error) == "down" for e in steps)
    [failure] = [e for e in events if isinstance(e, WorkflowErrorEvent)]
    assert isinstance(failure.error, StepExhaustedError)
    assert failure.workflow_id == "wf-1"
    # Replaying the failed workflow reports nothing new.
    events.clear()
    await run_workflow("wf-1", wf, None, driver, on_error=events.append)
    assert events == []


async def test_critical_failures_report_no_retry(clock, driver):
    events = []

    def fail():
        raise CriticalError("invalid")

    async def wf(ctx, _):
        return await ctx.step("validate", fail)

    await run_workflow("wf-1", wf, None, driver, on_error=events.append)
    step, workflow = events
    assert isinstance(step, StepErrorEvent)
    assert (step.attempt, step.will_retry, step.remaining_retries) == (1, False, 0)
    assert isinstance(workflow, WorkflowErrorEvent)
    assert isinstance(workflow.error, CriticalError)


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
