"""The live window (``live_wait``): a wait inside the running coroutine.

A message (or a child's end) arriving within the window is received by the
same coroutine, history in memory: the driver's namespace is read once
(``list``) however many waits were served. Past the window, or when the
host closes it, the wait unwinds exactly as without it and the next run
replays. An eviction or a cancel stops it as any entry.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from django_rivet import engine
from django_rivet.engine import (
    InMemoryDriver,
    StorageError,
    run_workflow,
    start_workflow,
)
from django_rivet.engine.runner import WorkflowRun


class CountingDriver(InMemoryDriver):
    """Counts the history loads (``list``) and the KV writes."""

    def __init__(self) -> None:
        super().__init__()
        self.lists = 0
        self.writes = 0

    async def list(self, prefix: bytes) -> Any:
        self.lists += 1
        return await super().list(prefix)

    async def batch(self, writes: Any) -> None:
        self.writes += 1
        await super().batch(writes)


async def blocked(run: WorkflowRun) -> None:
    """Return once the run waits in its live window."""
    assert run.live is not None
    await asyncio.wait_for(run.live.blocked.wait(), 5)


async def send(run: WorkflowRun, name: str, body: Any) -> None:
    """Send into the run's window; return once the wait woke."""
    await run.send(name, body)
    assert run.live is not None
    while run.live.blocked.is_set():
        await asyncio.sleep(0)


async def chatty(ctx: Any, input: Any) -> Any:
    total = 0
    for index in range(3):
        message = await ctx.messages.next(f"m{index}", names=["add"])
        total = await ctx.step(f"s{index}", lambda t=total, m=message: t + m.body)
    return total


async def test_messages_in_the_window_wake_it_without_reloading(clock):
    driver = CountingDriver()
    run = start_workflow("wf", chatty, None, driver, live_wait=60)
    for value in (1, 2, 3):
        await blocked(run)
        await send(run, "add", value)
    outcome = await run
    assert (outcome.state, outcome.output) == ("completed", 6)
    assert driver.lists == 1  # loaded once, never replayed
    assert run.live is not None and run.live.wakes == 3


async def test_a_message_after_the_window_wakes_it_by_replay(clock):
    driver = CountingDriver()
    run = start_workflow("wf", chatty, None, driver, live_wait=60)
    await blocked(run)
    clock.advance(61)
    outcome = await run
    assert outcome.state == "sleeping"
    assert outcome.waiting_for == ["add"]
    assert run.live is not None and run.live.unwound == 1
    assert driver.lists == 1
    await driver.add_message("add", 5)
    run = start_workflow("wf", chatty, None, driver, live_wait=60)
    await blocked(run)  # the replay received it, then waits for the next one
    assert driver.lists == 2
    await send(run, "add", 1)
    await blocked(run)
    await send(run, "add", 1)
    outcome = await run
    assert (outcome.state, outcome.output) == ("completed", 7)
    assert driver.lists == 2


async def test_a_message_sent_between_runs_is_what_a_yield_run_receives(clock):
    # The window is per run: a host without it replays as before.
    driver = CountingDriver()
    assert (await run_workflow("wf", chatty, None, driver)).state == "sleeping"
    for _ in range(3):
        await driver.add_message("add", 2)
    outcome = await run_workflow("wf", chatty, None, driver)
    assert (outcome.state, outcome.output) == ("completed", 6)
    assert driver.lists == 2


async def test_cancel_during_the_window_ends_it_cancelled(clock):
    driver = CountingDriver()
    run = start_workflow("wf", chatty, None, driver, live_wait=60)
    await blocked(run)
    await run.cancel()
    outcome = await run
    assert outcome.state == "cancelled"


async def test_an_eviction_stops_the_wait_and_resumes_elsewhere(clock):
    driver = CountingDriver()
    run = start_workflow("wf", chatty, None, driver, live_wait=60)
    await blocked(run)
    run.evict()
    outcome = await run
    assert outcome.state == "sleeping"
    assert outcome.sleep_until == clock.now()  # due again at once, as today


async def test_closing_the_window_unwinds_as_without_it(clock):
    driver = CountingDriver()
    run = start_workflow("wf", chatty, None, driver, live_wait=60)
    await blocked(run)
    run.end_live()  # a worker shutting down
    outcome = await run
    assert (outcome.state, outcome.waiting_for) == ("sleeping", ["add"])
    assert outcome.sleep_until is None


async def test_a_timeout_within_the_window_times_out_in_process(clock):
    async def wf(ctx: Any, input: Any) -> Any:
        batch = await ctx.messages.next_batch("b", names=["x"], count=2, timeout=30)
        return [m.body for m in batch]

    driver = CountingDriver()
    run = start_workflow("wf", wf, None, driver, live_wait=60)
    await blocked(run)
    clock.advance(30)
    outcome = await run
    assert (outcome.state, outcome.output) == ("completed", [])
    assert driver.lists == 1


async def test_a_sleep_within_the_window_is_slept_in_process(clock):
    async def wf(ctx: Any, input: Any) -> Any:
        await ctx.sleep("short", 30)
        await ctx.sleep("long", 600)
        return "done"

    driver = CountingDriver()
    run = start_workflow("wf", wf, None, driver, live_wait=60)
    await blocked(run)
    clock.advance(30)
    outcome = await run
    # The short sleep ended in process; the long one unwinds as today.
    assert outcome.state == "sleeping"
    assert outcome.sleep_until == clock.now() + 600
    assert driver.lists == 1


async def test_a_child_ending_in_the_window_wakes_the_parent(clock):
    async def parent(ctx: Any, input: Any) -> Any:
        return await ctx.child("kid", "child_wf", {"n": 1})

    driver = CountingDriver()
    run = start_workflow("wf", parent, None, driver, live_wait=60)
    await blocked(run)
    (child_id,) = driver.children
    driver.finish_child(child_id, output="grown")
    outcome = await run
    assert (outcome.state, outcome.output) == ("completed", "grown")
    assert driver.lists == 1


async def test_a_failing_listen_stops_the_run_as_storage_trouble(clock):
    class Broken(CountingDriver):
        async def wait_for_messages(self, names: Any) -> None:
            raise OSError("listen failed")

    driver = Broken()
    run = start_workflow("wf", chatty, None, driver, live_wait=60)
    with pytest.raises(Exception, match="listen failed"):
        await run


def test_the_window_lasts_a_positive_time():
    from django_rivet.engine.live import LiveWindow

    with pytest.raises(ValueError):
        LiveWindow(0)


async def test_a_reply_made_before_the_wait_is_seen_while_it_waits(clock):
    from django_rivet.engine import read_reply

    async def server(ctx: Any, input: Any) -> Any:
        for index in range(2):
            request = await ctx.messages.next(f"req{index}", names=["ask"])
            await ctx.reply(f"answer{index}", request, request.body * 2)
        return "done"

    driver = CountingDriver()
    run = start_workflow("wf", server, None, driver, live_wait=60)
    await blocked(run)
    message_id = await driver.add_message("ask", 21)
    while run.live is not None and run.live.wakes < 1:
        await asyncio.sleep(0)
    await blocked(run)  # waits for the next request, live
    assert await read_reply(driver, message_id) == (True, 42)
    run.end_live()
    assert (await run).state == "sleeping"


async def test_stream_values_written_before_the_wait_are_seen_while_it_waits(clock):
    async def writer(ctx: Any, input: Any) -> Any:
        await ctx.write_stream("out", "before")
        await ctx.messages.next("go", names=["go"])
        return "done"

    driver = CountingDriver()
    run = start_workflow("wf", writer, None, driver, live_wait=60)
    await blocked(run)
    assert [v for v in driver.streams.logs["out"].values]  # committed already
    await send(run, "go", None)
    assert (await run).state == "completed"


async def test_the_budget_bounds_the_time_live_in_all(clock):
    driver = CountingDriver()
    run = start_workflow("wf", chatty, None, driver, live_wait=60, live_budget=100)
    await blocked(run)
    clock.advance(50)
    await send(run, "add", 1)
    await blocked(run)  # from 50 s: its window would end at 110 s, the budget at 100
    assert run.live is not None and run.live.waiting[0].until == clock.now() + 50
    clock.advance(50)
    outcome = await run
    assert (outcome.state, outcome.waiting_for) == ("sleeping", ["add"])
    assert driver.lists == 1


# -- what a wake costs: what is new, not the history -----------------------------------
_ENGINE = str(Path(engine.__file__).parent)
# Not counted: the entry id maker reads random bytes for 256 ids at a time,
# a line more in whichever window the 256th id falls (where depends on
# the ids the process made before).
_IDS = str(Path(engine.__file__).parent / "ids.py")


async def _engine_lines_per_wake(history: int, wakes: int = 3) -> float:
    """Lines of engine code a live wake executes after ``history`` steps.

    A deterministic measure of its work (the tracer counts, it does not
    time): a flush plan, an index or a copy that walked the history would
    execute lines in proportion to it.
    """

    async def chatty_after(ctx: Any, input: Any) -> None:
        for index in range(history):
            await ctx.step(f"s{index}", lambda index=index: index)
        index = 0
        while True:
            message = await ctx.messages.next(f"m{index}")
            await ctx.step(f"after{index}", lambda body=message.body: body)
            index += 1

    driver = CountingDriver()
    run = start_workflow("wf", chatty_after, None, driver, live_wait=60)
    await blocked(run)
    await send(run, "m0", 0)  # the first wake pays for what is first once
    await blocked(run)
    lines = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal lines
        if event == "line":
            lines += 1
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        name = frame.f_code.co_filename
        return local if name.startswith(_ENGINE) and name != _IDS else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        for index in range(1, wakes + 1):
            await send(run, f"m{index}", index)
            await blocked(run)
    finally:
        sys.settrace(previous)
    assert driver.lists == 1  # never reloaded
    run.evict()
    assert (await run).state == "sleeping"
    return lines / wakes


async def test_a_live_wake_costs_the_same_at_any_history_size(clock):
    small = await _engine_lines_per_wake(300)
    large = await _engine_lines_per_wake(3_000)
    assert large == small


class CancelCheckingDriver(CountingDriver):
    """A host that can cancel while the run holds it: counts its checks."""

    def __init__(self) -> None:
        super().__init__()
        self.checks = 0
        self.cancelled = False

    async def check_cancel(self) -> None:
        self.checks += 1
        if self.cancelled:
            raise StorageError("cancelled")


async def test_a_wake_with_its_message_leaves_the_cancel_check_to_the_step(clock):
    driver = CancelCheckingDriver()
    run = start_workflow("wf", chatty, None, driver, live_wait=60)
    await blocked(run)
    await send(run, "add", 1)
    await blocked(run)
    assert driver.checks == 1  # the step's, before its function
    # A wake that finds nothing (here the poll's) asks the host.
    driver.cancelled = True
    clock.advance(driver.worker_poll_interval)
    with pytest.raises(StorageError):
        await run
    assert driver.checks == 2
