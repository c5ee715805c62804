"""A cancellation rolls back like a failure and ends cancelled; resume_workflow."""

from __future__ import annotations

import pytest

from django_rivet.engine import (
    WorkflowCancelled,
    WorkflowTimeout,
    read_history,
    read_workflow,
    resume_workflow,
    run_workflow,
)

from .helpers import execute


def workflow_with_refunds(log, fail_refund=None):
    async def wf(ctx, _):
        await ctx.rollback_checkpoint("start")

        async def refund(rctx, output):
            if fail_refund and fail_refund.pop():
                raise RuntimeError("refund service down")
            log.append(f"refund:{output}")

        await ctx.step("charge", lambda: "ch_1", rollback=refund)
        await ctx.step("reserve", lambda: "r_1", rollback=refund)
        await ctx.messages.next("wait", names=["go"])
        return "done"

    return wf


@pytest.mark.parametrize("reason", ["cancelled", "timeout", "parent_cancelled"])
async def test_a_cancel_runs_the_rollbacks_and_ends_cancelled(clock, driver, reason):
    log = []
    wf = workflow_with_refunds(log)
    assert (await execute(clock, "wf-1", wf, driver, "yield")).state == "sleeping"
    outcome = await run_workflow("wf-1", wf, None, driver, cancel=reason)
    assert outcome.state == "cancelled"
    assert isinstance(outcome.error, WorkflowCancelled)
    assert isinstance(outcome.error, WorkflowTimeout) == (reason == "timeout")
    assert outcome.error.reason == reason
    assert log == ["refund:r_1", "refund:ch_1"]
    snapshot = await read_workflow(driver)
    assert snapshot.state == "cancelled"
    assert snapshot.error["metadata"] == {"reason": reason}
    # Later runs change nothing.
    assert (await execute(clock, "wf-1", wf, driver, "yield")).state == "cancelled"
    assert log == ["refund:r_1", "refund:ch_1"]


async def test_a_failing_rollback_during_a_cancel_is_retried_then_ends_cancelled(
    clock, driver
):
    log = []
    wf = workflow_with_refunds(log, fail_refund=[False, True])
    await execute(clock, "wf-1", wf, driver, "yield")
    outcome = await run_workflow("wf-1", wf, None, driver, cancel="timeout")
    assert outcome.state == "rolling_back"
    assert (await read_workflow(driver)).state == "rolling_back"
    outcome = await run_workflow("wf-1", wf, None, driver)  # the retry
    assert outcome.state == "cancelled"
    assert isinstance(outcome.error, WorkflowTimeout)
    assert log == ["refund:r_1", "refund:ch_1"]


async def test_a_cancel_of_a_finished_workflow_changes_nothing(clock, driver):
    async def wf(ctx, _):
        return await ctx.step("s", lambda: 1)

    assert (await execute(clock, "wf-1", wf, driver, "yield")).output == 1
    outcome = await run_workflow("wf-1", wf, None, driver, cancel="cancelled")
    assert (outcome.state, outcome.output) == ("completed", 1)


async def test_an_unknown_cancel_reason_is_refused(driver):
    async def wf(ctx, _):
        return 1

    with pytest.raises(ValueError, match="cancel reason"):
        await run_workflow("wf-1", wf, None, driver, cancel="bored")


async def test_resume_continues_a_cancelled_workflow_from_where_it_stopped(
    clock, driver, mode
):
    ran = []

    async def wf(ctx, _):
        await ctx.step("first", lambda: ran.append("first"))
        await ctx.messages.next("wait", names=["go"])
        await ctx.step("second", lambda: ran.append("second"))
        return "done"

    await execute(clock, "wf-1", wf, driver, "yield")
    assert (await run_workflow("wf-1", wf, None, driver, cancel="cancelled")).state == (
        "cancelled"
    )
    assert await resume_workflow("wf-1", driver)
    assert driver.get_alarm("wf-1") is not None
    await driver.add_message("go", None)
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == "done"
    assert ran == ["first", "second"]
    assert not await resume_workflow("wf-1", driver)  # completed: not cancelled


async def test_resume_refuses_a_workflow_whose_cancel_ran_rollbacks(clock, driver):
    log = []
    wf = workflow_with_refunds(log)
    await execute(clock, "wf-1", wf, driver, "yield")
    await run_workflow("wf-1", wf, None, driver, cancel="cancelled")
    assert not await resume_workflow("wf-1", driver)
    assert (await read_workflow(driver)).state == "cancelled"
    assert all(e.rollback_completed_at for e in await read_history(driver) if
               e.kind == "step")  # fmt: skip
