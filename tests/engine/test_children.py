"""ctx.child and ctx.start_child: the engine's side, with InMemoryDriver as host."""

from __future__ import annotations

import pytest

from django_rivet.engine import (
    ChildStart,
    ChildWorkflowError,
    HistoryDivergedError,
    InMemoryDriver,
    StepOutputError,
    StorageError,
    read_history,
    run_workflow,
    start_workflow,
)
from django_rivet.engine.children import default_child_id

from .conftest import START
from .helpers import execute, idle


class CountingHost(InMemoryDriver):
    """Counts child starts; can fail the flush after one."""

    def __init__(self) -> None:
        super().__init__()
        self.starts: list[str] = []
        self.fail_next_batch = False

    async def start_child(self, start):
        self.starts.append(start.child_id)
        await super().start_child(start)

    async def batch(self, writes):
        if self.fail_next_batch:
            self.fail_next_batch = False
            raise OSError("database went away")
        await super().batch(writes)


async def parent(ctx, _):
    label = await ctx.child("ship", "label", {"order": 7})
    return {"label": label}


async def test_a_parent_waits_for_its_child_and_gets_its_output(clock, mode):
    driver = CountingHost()
    run = start_workflow("order-7", parent, None, driver, mode)
    if mode == "yield":
        outcome = await run
        assert outcome.state == "sleeping"
        assert outcome.waiting_for == ["child:order-7/ship"]
        assert outcome.sleep_until is None
        driver.finish_child("order-7/ship", output="L-7")
        outcome = await run_workflow("order-7", parent, None, driver)
    else:
        await idle(clock, run._task, until=START)
        assert not run._task.done()
        driver.finish_child("order-7/ship", output="L-7")
        outcome = await run
    assert outcome.state == "completed"
    assert outcome.output == {"label": "L-7"}
    start = driver.children["order-7/ship"]
    assert (start.parent_id, start.workflow, start.input) == (
        "order-7",
        "label",
        {"order": 7},
    )
    assert not start.detached
    [entry] = await read_history(driver)
    assert (entry.kind, entry.location, entry.status) == ("child", "ship", "completed")
    assert entry.output == "L-7"


async def test_replays_start_the_child_once(clock, mode):
    driver = CountingHost()
    for _ in range(3):
        outcome = await execute(clock, "order-7", parent, driver, "yield")
        assert outcome.state == "sleeping"
    driver.finish_child("order-7/ship", output="L-7")
    assert (await execute(clock, "order-7", parent, driver, mode)).state == "completed"
    assert (await execute(clock, "order-7", parent, driver, mode)).output == {
        "label": "L-7"
    }
    assert driver.starts == ["order-7/ship"]


async def test_a_crash_after_the_start_finds_the_same_child_again(clock, mode):
    driver = CountingHost()
    driver.fail_next_batch = True  # the flush recording the child fails
    with pytest.raises(StorageError):
        await execute(clock, "order-7", parent, driver, mode)
    assert await read_history(driver) == []
    outcome = await execute(clock, "order-7", parent, driver, "yield")
    assert outcome.waiting_for == ["child:order-7/ship"]
    # Started twice with the same id: the host started one child.
    assert driver.starts == ["order-7/ship", "order-7/ship"]
    assert list(driver.children) == ["order-7/ship"]


async def test_a_failed_child_raises_child_workflow_error(clock, driver, mode):
    await execute(clock, "order-7", parent, driver, "yield")
    driver.finish_child(
        "order-7/ship", "failed", error={"name": "CriticalError", "message": "no ink"}
    )
    outcome = await execute(clock, "order-7", parent, driver, mode)
    assert outcome.state == "failed"
    error = outcome.error
    assert isinstance(error, ChildWorkflowError)
    assert error.qualified_code == "workflow/child_failed"
    assert error.child_id == "order-7/ship"
    assert error.state == "failed"
    assert error.child_error == {"name": "CriticalError", "message": "no ink"}
    [entry] = await read_history(driver)
    assert entry.status == "failed" and entry.error["message"] == "no ink"
    # Replayed from history, without asking the host again.
    driver.child_outcomes.clear()
    again = await execute(clock, "order-7", parent, driver, mode)
    assert isinstance(again.error, ChildWorkflowError)
    assert again.error.child_id == "order-7/ship"


async def test_try_block_catches_a_failed_or_cancelled_child(clock, driver, mode):
    async def wf(ctx, _):
        result = await ctx.try_block(
            "guard", lambda child: child.child("ship", "label", {})
        )
        return [result.ok, result.failure.kind, result.failure.error.state]

    await execute(clock, "wf-1", wf, driver, "yield")
    driver.finish_child("wf-1/guard/ship", "cancelled")
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == [False, "child", "cancelled"]


async def test_start_child_returns_the_id_at_once(clock, driver, mode):
    async def wf(ctx, _):
        first = await ctx.start_child("audit", "audit_log", {"n": 1}, detached=True)
        second = await ctx.start_child("notify", "mailer", id="mail-1")
        return [first, second]

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.output == ["wf-1/audit", "mail-1"]
    assert driver.children["wf-1/audit"].detached
    assert not driver.children["mail-1"].detached
    assert [e.status for e in await read_history(driver)] == ["completed"] * 2


async def test_child_ids_nest_under_loops_and_stay_within_255_chars(clock, driver):
    from django_rivet.engine import Loop

    async def wf(ctx, _):
        async def body(ctx, i):
            await ctx.start_child("spawn", "worker", {"i": i})
            return Loop.continue_(i + 1) if i < 1 else Loop.break_(i)

        return await ctx.loop("batch", body, state=0)

    await execute(clock, "wf-1", wf, driver, "yield")
    assert sorted(driver.children) == ["wf-1/batch/~0/spawn", "wf-1/batch/~1/spawn"]
    long_parent = "p" * 250
    child_id = default_child_id(long_parent, "some/location")
    assert len(child_id) == 255 and child_id.startswith("p" * 222 + "/")
    assert child_id == default_child_id(long_parent, "some/location")


async def test_an_unstorable_child_input_fails_the_parent(clock, driver, mode):
    async def wf(ctx, _):
        return await ctx.child("ship", "label", {"bad": object()})

    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert isinstance(outcome.error, StepOutputError)
    assert driver.children == {}


async def test_a_host_refusing_the_child_fails_the_parent(clock, mode):
    driver = InMemoryDriver()
    await driver.start_child(ChildStart("other", "wf-1/ship", "somethingElse", None))
    outcome = await execute(clock, "wf-1", parent, driver, mode)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, ValueError)
    assert "already used" in str(outcome.error)


async def test_turning_a_child_into_start_child_diverges(clock, driver):
    await execute(clock, "wf-1", parent, driver, "yield")

    async def changed(ctx, _):
        return await ctx.start_child("ship", "label", {"order": 7})

    outcome = await execute(clock, "wf-1", changed, driver, "yield")
    assert isinstance(outcome.error, HistoryDivergedError)
    assert outcome.error.location == "ship"


async def two_children(ctx, _):
    a = await ctx.start_child("a", "label", {}, queue="q", partition_key="t1")
    b = await ctx.start_child("b", "label", {})
    first = await ctx.wait_first("first", [a, b])
    return [first.child_id, first.state, first.output, first.error]


async def test_wait_first_returns_the_first_to_end_and_replays_it(clock):
    driver = CountingHost()
    outcome = await run_workflow("p", two_children, None, driver)
    assert (outcome.state, outcome.waiting_for) == (
        "sleeping",
        ["child:p/a", "child:p/b"],
    )
    assert driver.children["p/a"].queued == {"queue": "q", "partition_key": "t1"}
    assert driver.children["p/b"].queued is None
    driver.finish_child("p/b", "failed", error={"name": "Boom", "message": "no"})
    outcome = await run_workflow("p", two_children, None, driver)
    assert outcome.output == ["p/b", "failed", None, {"name": "Boom", "message": "no"}]
    driver.finish_child("p/a", output="later")  # ended after: the record stands
    again = await run_workflow("p", two_children, None, driver)
    assert again.output == outcome.output
    entries = [(e.kind, e.location) for e in await read_history(driver)]
    assert entries == [("child", "a"), ("child", "b"), ("wait_first", "first")]


async def test_wait_first_over_other_ids_on_replay_diverges(clock):
    driver = CountingHost()
    driver.finish_child("x", output=1)

    async def waits(ctx, ids):
        return (await ctx.wait_first("first", ids)).child_id

    async def changed(ctx, ids):  # the code now waits for other workflows
        return (await ctx.wait_first("first", list(reversed(ids)))).child_id

    assert (await run_workflow("p", waits, ["x", "y"], driver)).output == "x"
    outcome = await run_workflow("p", changed, None, driver)
    assert outcome.state == "failed"
    assert isinstance(outcome.error, HistoryDivergedError)
