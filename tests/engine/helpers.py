"""Helpers for driving workflows under a virtual clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from django_rivet.clock import VirtualClock
from django_rivet.engine import InMemoryDriver, WorkflowOutcome, run_workflow

_SETTLE_SPINS = 50


async def _spin(task: asyncio.Future | None = None) -> None:
    for _ in range(_SETTLE_SPINS):
        if task is not None and task.done():
            return
        await asyncio.sleep(0)


def _next_deadline(clock: VirtualClock) -> float | None:
    # Peeks at the virtual clock's waiters (test-only) to jump straight to the
    # next timer instead of advancing by guesses.
    deadlines = [waiter[0] for waiter in clock._waiters]
    return min(deadlines) if deadlines else None


async def drive(clock: VirtualClock, awaitable: Any, *, limit: int = 1000) -> Any:
    """Await ``awaitable``, jumping the clock to each timer it waits on."""
    task = asyncio.ensure_future(awaitable)
    for _ in range(limit):
        await _spin(task)
        if task.done():
            return task.result()
        deadline = _next_deadline(clock)
        if deadline is None:
            task.cancel()
            raise AssertionError("the awaitable is blocked on something not timed")
        clock.set(max(deadline, clock.now()))
    task.cancel()
    raise AssertionError("the awaitable did not finish")


async def idle(clock: VirtualClock, task: asyncio.Future, *, until: float) -> None:
    """Let ``task`` run, firing timers up to ``until``, until it blocks."""
    for _ in range(1000):
        await _spin(task)
        deadline = _next_deadline(clock)
        if task.done() or deadline is None or deadline > until:
            return
        clock.set(max(deadline, clock.now()))


async def execute(
    clock: VirtualClock,
    workflow_id: str,
    fn: Any,
    driver: InMemoryDriver,
    mode: str,
    input: Any = None,
    **options: Any,
) -> WorkflowOutcome:
    """Run a workflow once in ``mode``; live runs get their timers fired."""
    run = run_workflow(workflow_id, fn, input, driver, mode, **options)
    if mode == "live":
        return await drive(clock, run)
    return await run


def raising(
    attempts: list[Any], error: type[BaseException], message: str
) -> Callable[[], Any]:
    """Return a step function that records each call in ``attempts`` and raises."""

    def fail() -> Any:
        attempts.append(1)
        raise error(message)

    return fail


async def sleep_through_retries(
    clock: VirtualClock, workflow_id: str, fn: Any, driver: InMemoryDriver, retries: int
) -> None:
    """Run a workflow (yield mode) through ``retries`` backoffs, each to its end."""
    for _ in range(retries):
        outcome = await run_workflow(workflow_id, fn, None, driver)
        assert outcome.state == "sleeping"
        clock.set(outcome.sleep_until)


async def run_to_end(
    clock: VirtualClock,
    workflow_id: str,
    fn: Any,
    driver: InMemoryDriver,
    mode: str,
    input: Any = None,
    *,
    runs: int = 50,
    **options: Any,
) -> WorkflowOutcome:
    """Run until the workflow stops sleeping on a deadline (yield mode re-runs)."""
    for _ in range(runs):
        outcome = await execute(clock, workflow_id, fn, driver, mode, input, **options)
        if outcome.state != "sleeping" or outcome.sleep_until is None:
            return outcome
        clock.set(max(outcome.sleep_until, clock.now()))
    raise AssertionError(f"still sleeping after {runs} runs")


class RecordingDriver(InMemoryDriver):
    """Counts batch calls and their sizes, and range deletes."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[tuple[bytes, bytes]]] = []
        self.range_deletes: list[tuple[bytes, bytes]] = []
        self.calls: list[str] = []

    async def batch(self, writes):
        self.batches.append(list(writes))
        self.calls.append("batch")
        await super().batch(writes)

    async def delete_range(self, start, end):
        self.range_deletes.append((start, end))
        self.calls.append("delete_range")
        await super().delete_range(start, end)

    async def delete_prefix(self, prefix):
        self.calls.append("delete_prefix")
        await super().delete_prefix(prefix)

    async def batch_delete(self, keys):
        self.calls.append("batch_delete")
        await super().batch_delete(keys)

    async def atomic_flush(self, writes, deletions):
        self.batches.append(list(writes))
        self.calls.append("atomic_flush")
        await super().atomic_flush(writes, deletions)
