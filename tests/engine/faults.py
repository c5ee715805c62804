"""Fault injection for the engine: a driver wrapper that fails or "crashes".

:class:`FaultyDriver` wraps any driver and counts its calls (KV, messages,
alarms, transactional steps). At call number ``at`` it injects a fault:

* ``fail``: the call raises, as a broken database would (``OSError``; for
  ``run_transactional``, whose own errors a driver reports as
  ``StorageError``, a ``StorageError``), and does nothing;
* ``crash``: the call raises :class:`Crash`, a ``BaseException`` standing
  for the process dying just before the call: the run is abandoned with
  whatever the driver holds;
* ``crash_after``: the call completes, then :class:`Crash` (the process
  died before it learnt the call succeeded).

:data:`SCENARIOS` are workflows covering steps (plain, ephemeral,
transactional, retried), loops with pruning, join, race (losers deleted),
sleep, messages and rollback. :func:`complete` drives one to its end the
way a host does (re-run after each pause, advance the virtual clock, send
the next scripted message when it waits for one). :func:`check_recovery`
runs a scenario with one fault, then fresh runs on the same storage, and
checks the outcome and history equal the fault-free run's and that nothing
acknowledged before the fault is lost or redone.

Shared by the in-memory suite (every ``at``) and the Django driver's
(``tests/workflows/test_faults.py``, on SQLite and PostgreSQL).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from django_rivet.clock import VirtualClock
from django_rivet.engine import (
    CriticalError,
    Loop,
    StorageError,
    WorkflowOutcome,
    cbor,
    read_history,
    run_workflow,
    start_workflow,
)

KINDS = ("fail", "crash", "crash_after")
_COUNTED = (
    "get",
    "set",
    "delete",
    "delete_prefix",
    "delete_range",
    "list",
    "batch",
    "batch_completing",
    "batch_delete",
    "atomic_flush",
    "run_transactional",
    "set_alarm",
    "clear_alarm",
    "add_message",
    "receive_messages",
    "complete_message",
    "append_streams",
    "wait_for_messages",
)


class Crash(BaseException):  # noqa: N818 - a simulated process death
    """The process running the workflow died."""


class FaultyDriver:
    """Forward every call to ``inner``, injecting one fault at call ``at``."""

    def __init__(self, inner: Any, at: int | None = None, kind: str = "fail"):
        self.inner = inner
        self.at = at
        self.kind = kind
        self.calls = 0
        self.called: collections.Counter[str] = collections.Counter()
        self.fired: str | None = None
        self.atomic_batch = inner.atomic_batch
        self.worker_poll_interval = inner.worker_poll_interval
        if hasattr(inner, "call_sync"):
            self.call_sync = inner.call_sync

    def __getattr__(self, name: str) -> Any:
        if name not in _COUNTED:
            raise AttributeError(name)
        method = getattr(self.inner, name)

        async def call(*args: Any) -> Any:
            self.calls += 1
            self.called[name] += 1
            if self.calls != self.at:
                return await method(*args)
            self.fired = name
            if self.kind == "fail":
                if name == "run_transactional":
                    raise StorageError("injected failure")
                raise OSError(f"injected failure of {name}")
            if self.kind == "crash":
                raise Crash(name)
            await method(*args)
            raise Crash(name)

        return call


@dataclasses.dataclass
class Effects:
    """What the workflow did to the outside world, per step or handler name."""

    counts: collections.Counter[str] = dataclasses.field(
        default_factory=collections.Counter
    )

    def effect(self, name: str, value: Any) -> Callable[[], Any]:
        def run() -> Any:
            self.counts[name] += 1
            return value

        return run

    def critical(self, name: str) -> Callable[[], Any]:
        def run() -> Any:
            self.counts[name] += 1
            raise CriticalError(f"{name} refuses")

        return run

    def flaky(self, name: str, value: Any) -> Callable[[], Any]:
        """Fails on its first execution ever, then returns ``value``."""

        def run() -> Any:
            self.counts[name] += 1
            if self.counts[name] == 1:
                raise RuntimeError(f"{name} fails once")
            return value

        return run


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    build: Callable[[Effects], Callable[..., Awaitable[Any]]]
    input: Any = None
    # Sent one group each time the workflow waits for a message.
    messages: tuple[tuple[tuple[str, Any], ...], ...] = ()


def _steps(effects: Effects) -> Callable[..., Awaitable[Any]]:
    async def wf(ctx: Any, input: Any) -> Any:
        a = await ctx.step("a", effects.effect("a", input["a"]))
        b = await ctx.step("b", effects.effect("b", a + 1), ephemeral=True)
        c = await ctx.step("c", effects.effect("c", b + 1), transaction=True)
        d = await ctx.step("d", effects.flaky("d", c + 1), retry_backoff_base=5)
        tried = await ctx.try_step("e", effects.critical("e"))
        return [a, b, c, d, tried.ok, tried.failure.kind]

    return wf


def _loop(effects: Effects) -> Callable[..., Awaitable[Any]]:
    async def body(ctx: Any, state: Any) -> Any:
        index = state["i"]
        value = await ctx.step("add", effects.effect(f"sum/~{index}/add", index * 10))
        total = state["total"] + value
        if index == 6:
            return Loop.break_(total)
        return Loop.continue_({"i": index + 1, "total": total})

    async def wf(ctx: Any, input: Any) -> Any:
        total = await ctx.loop(
            "sum",
            body,
            state={"i": 0, "total": 0},
            history_prune_interval=2,
            history_size=2,
        )
        after = await ctx.step("after", effects.effect("after", total + 1))
        return [total, after]

    return wf


def _join_race(effects: Effects) -> Callable[..., Awaitable[Any]]:
    async def left(ctx: Any) -> Any:
        one = await ctx.step("l1", effects.effect("both/left/l1", 1))
        return one + await ctx.step("l2", effects.effect("both/left/l2", 2))

    async def right(ctx: Any) -> Any:
        return await ctx.step("r1", effects.effect("both/right/r1", 3))

    async def fast(ctx: Any) -> Any:
        return await ctx.step("f", effects.effect("first/fast/f", "fast"))

    async def slow(ctx: Any) -> Any:
        await ctx.step("s", effects.effect("first/slow/s", "slow"))
        await ctx.sleep("nap", 3600)
        return "slow"

    async def wf(ctx: Any, input: Any) -> Any:
        joined = await ctx.join("both", {"left": left, "right": right})
        winner, value = await ctx.race("first", {"slow": slow, "fast": fast})
        done = await ctx.step("done", effects.effect("done", "ok"))
        return [joined, winner, value, done]

    return wf


def _sleep_messages(effects: Effects) -> Callable[..., Awaitable[Any]]:
    async def wf(ctx: Any, input: Any) -> Any:
        await ctx.step("before", effects.effect("before", 0))
        await ctx.sleep("pause", 60)
        first = await ctx.messages.next("first", names=["go"])
        batch = await ctx.messages.next_batch(
            "batch", names=["item"], count=2, timeout=600
        )
        bodies = [first.body, *[m.body for m in batch]]
        return await ctx.step("use", effects.effect("use", bodies))

    return wf


def _rollback(effects: Effects) -> Callable[..., Awaitable[Any]]:
    def undo(name: str) -> Callable[..., Any]:
        def handler(rollback_ctx: Any, output: Any) -> None:
            effects.counts[f"undo-{name}"] += 1

        return handler

    def decline() -> Any:
        effects.counts["decline"] += 1
        raise CriticalError("declined")

    async def wf(ctx: Any, input: Any) -> Any:
        await ctx.rollback_checkpoint("start")
        for name in ("charge", "hold"):
            await ctx.step(name, effects.effect(name, name), rollback=undo(name))
        await ctx.step("decline", decline)
        return "unreachable"

    return wf


def _streams(effects: Effects) -> Callable[..., Awaitable[Any]]:
    def chunk(ctx: Any, count: int) -> Callable[[], Awaitable[int]]:
        async def write() -> int:
            effects.counts["chunk"] += 1
            for index in range(count):
                await ctx.write_stream("steps", f"s{index}")
            if effects.counts["chunk"] == 1:
                raise RuntimeError("chunk fails once")
            return count

        return write

    async def wf(ctx: Any, input: Any) -> Any:
        for index in range(3):
            await ctx.write_stream("body", index)
        a = await ctx.step("a", effects.effect("a", 1))
        await ctx.write_stream("body", {"after": a})
        written = await ctx.step("chunk", chunk(ctx, 2), retry_backoff_base=5)
        await ctx.sleep("pause", 60)
        for index in range(3, 8):
            await ctx.write_stream("body", index)
        await ctx.close_stream("body")
        return written

    return wf


SCENARIOS = (
    Scenario("steps", _steps, {"a": 1}),
    Scenario("loop", _loop),
    Scenario("join_race", _join_race),
    Scenario(
        "sleep_messages",
        _sleep_messages,
        messages=((("go", {"n": 1}),), (("item", "x"), ("item", "y"))),
    ),
    Scenario("rollback", _rollback),
    Scenario("streams", _streams),
)


async def complete(
    clock: VirtualClock,
    workflow_id: str,
    fn: Callable[..., Awaitable[Any]],
    input: Any,
    driver: Any,
    inbox: Any,
    pending: list[tuple[tuple[str, Any], ...]],
    *,
    runs: int = 60,
    live_wait: float = 0.0,
) -> WorkflowOutcome:
    """Run like a host until the workflow finishes; send messages when asked.

    ``inbox`` receives the scripted messages (the unfaulted driver: a sent
    message is acknowledged to its sender once ``add_message`` returned).
    With ``live_wait`` each run has a live window, and the host acts while
    the run waits in it (see :func:`run_live`).
    """
    for _ in range(runs):
        if live_wait:
            outcome = await run_live(
                clock, workflow_id, fn, input, driver, inbox, pending, live_wait
            )
        else:
            outcome = await run_workflow(workflow_id, fn, input, driver)
        if outcome.state in ("completed", "failed", "cancelled"):
            return outcome
        if outcome.state == "sleeping" and outcome.waiting_for and pending:
            for name, body in pending.pop(0):
                await inbox.add_message(name, body)
        elif outcome.sleep_until is not None:
            clock.set(max(outcome.sleep_until, clock.now()))
        elif outcome.state == "sleeping":
            raise AssertionError(f"{workflow_id} waits for {outcome.waiting_for}")
    raise AssertionError(f"{workflow_id} did not finish in {runs} runs")


async def run_live(
    clock: VirtualClock,
    workflow_id: str,
    fn: Callable[..., Awaitable[Any]],
    input: Any,
    driver: Any,
    inbox: Any,
    pending: list[tuple[tuple[str, Any], ...]],
    live_wait: float,
) -> WorkflowOutcome:
    """One run with a live window: while it waits there, send or advance.

    A message wait gets the next scripted group sent into its window (woken
    in process); any other wait (a sleep, or nothing left to send) sees the
    clock jump to where it ends (its deadline, or the window's end, when it
    unwinds as without the window).
    """
    run = start_workflow(workflow_id, fn, input, driver, live_wait=live_wait)
    window = run.live
    assert window is not None
    task = asyncio.ensure_future(run.result())
    while True:
        blocked = asyncio.ensure_future(window.blocked.wait())
        done, _ = await asyncio.wait({task, blocked}, return_when="FIRST_COMPLETED")
        blocked.cancel()
        await asyncio.gather(blocked, return_exceptions=True)
        if task in done:
            return task.result()
        if not window.waiting:
            continue  # it woke before the host looked (a failed listen)
        waiting = window.waiting[0]
        if waiting.names != () and pending:
            await _send_group(inbox, pending.pop(0))
        else:
            clock.set(max(waiting.until, clock.now()))
        for _ in range(10_000):  # until the wait woke (or the run ended)
            if not window.blocked.is_set() or task.done():
                break
            await asyncio.sleep(0.001 if _ > 100 else 0)
        else:
            raise AssertionError(f"{workflow_id}: the live wait {waiting} never woke")


async def _send_group(inbox: Any, group: tuple[tuple[str, Any], ...]) -> None:
    """Send a scripted group at once: the live run wakes to all of it."""
    if not hasattr(inbox, "workflow_id"):  # in memory: nothing runs in between
        for name, body in group:
            await inbox.add_message(name, body)
        return
    from asgiref.sync import sync_to_async

    from django_rivet.workflows import sends

    # One transaction: the in-process signal follows its commit.
    batch = [sends.Send(inbox.workflow_id, name, body) for name, body in group]
    await sync_to_async(sends.send_many)(batch)


def _shape(history: list[Any]) -> list[tuple[str, str, str, Any]]:
    def output(entry: Any) -> Any:
        if entry.kind == "message":  # ids and times differ from run to run
            return [(m["name"], m["body"]) for m in entry.output or ()]
        return entry.output

    # By location: parallel branches may record their entries in another
    # order from one run to the next.
    return sorted((h.kind, h.location, h.status, output(h)) for h in history)


@dataclasses.dataclass
class Reference:
    """A scenario's fault-free result: outcome, history, effects, driver calls."""

    outcome: tuple[str, Any, str | None]
    history: list[tuple[str, str, str, Any]]
    effects: collections.Counter[str]
    calls: int
    streams: dict[str, tuple[list[Any], bool]] = dataclasses.field(default_factory=dict)
    called: collections.Counter[str] = dataclasses.field(
        default_factory=collections.Counter
    )


async def stream_contents(inner: Any) -> dict[str, tuple[list[Any], bool]]:
    """Return every stream of the driver's workflow: ``key: (values, closed)``."""
    memory = getattr(inner, "streams", None)
    if memory is not None:
        return {
            key: ([cbor.loads(v) for v in log.values], log.closed)
            for key, log in memory.logs.items()
        }
    from asgiref.sync import sync_to_async

    from django_rivet.workflows import streams

    return await sync_to_async(streams.contents)(inner.workflow_id)


def check_streams(
    found: dict[str, tuple[list[Any], bool]],
    expected: dict[str, tuple[list[Any], bool]],
    context: str,
) -> None:
    """Body streams match exactly; values written in steps come at least once."""
    assert found.keys() == expected.keys(), context
    for key, (values, closed) in expected.items():
        got, got_closed = found[key]
        assert got_closed == closed, f"{context}: stream {key} closed={got_closed}"
        if key == "steps":  # written inside a retried step: at least once
            assert set(got) == set(values), f"{context}: stream {key} {got}"
        else:
            assert got == values, f"{context}: stream {key} has {got}"


def _outcome(outcome: WorkflowOutcome) -> tuple[str, Any, str | None]:
    error = outcome.error
    return (
        outcome.state,
        outcome.output,
        None if error is None else f"{type(error).__name__}: {error}",
    )


async def reference(
    clock: VirtualClock,
    scenario: Scenario,
    workflow_id: str,
    inner: Any,
    live_wait: float = 0.0,
) -> Reference:
    """Run ``scenario`` without faults, counting driver calls."""
    effects = Effects()
    driver = FaultyDriver(inner)
    outcome = await complete(
        clock,
        workflow_id,
        scenario.build(effects),
        scenario.input,
        driver,
        inner,
        list(scenario.messages),
        live_wait=live_wait,
    )
    history = _shape(await read_history(inner))
    streams = await stream_contents(inner)
    return Reference(
        _outcome(outcome), history, effects.counts, driver.calls, streams,
        driver.called,
    )  # fmt: skip


def _done_steps(history: list[Any]) -> set[str]:
    return {h.location for h in history if h.kind == "step" and h.status == "completed"}


def _done_rollbacks(history: list[Any]) -> set[str]:
    return {
        h.location.rsplit("/", 1)[-1]
        for h in history
        if h.kind == "step" and h.rollback_completed_at is not None
    }


async def check_recovery(
    clock: VirtualClock,
    scenario: Scenario,
    workflow_id: str,
    inner: Any,
    expected: Reference,
    at: int,
    kind: str,
    live_wait: float = 0.0,
) -> str | None:
    """Fault call ``at`` with ``kind``, recover with fresh runs, compare.

    Returns the name of the faulted driver call (None if the run made fewer
    calls than ``at``).
    """
    effects = Effects()
    driver = FaultyDriver(inner, at=at, kind=kind)
    pending = list(scenario.messages)
    fn = scenario.build(effects)
    try:
        outcome = await complete(
            clock, workflow_id, fn, scenario.input, driver, inner, pending,
            live_wait=live_wait,
        )  # fmt: skip
    except (StorageError, Crash) as stopped:
        # The fault stopped the run (a driver failure is the host's to retry,
        # never the workflow's failure): what the driver holds now is what
        # was acknowledged. Recover with fresh runs, as a host would.
        acknowledged = await read_history(inner)
        before = collections.Counter(effects.counts)
        outcome = await complete(
            clock, workflow_id, fn, scenario.input, driver, inner, pending,
            live_wait=live_wait,
        )  # fmt: skip
        context = f"{scenario.name}: {kind} at call {at} ({driver.fired}, {stopped!r})"
        for location in _done_steps(acknowledged):
            assert effects.counts[location] == before[location], (
                f"{context}: completed step {location} ran again"
            )
        for name in _done_rollbacks(acknowledged):
            key = f"undo-{name}"
            assert effects.counts[key] == before[key], (
                f"{context}: completed rollback of {name} ran again"
            )
    else:
        context = f"{scenario.name}: {kind} at call {at} ({driver.fired})"
    assert _outcome(outcome) == expected.outcome, f"{context}: {_outcome(outcome)}"
    assert _shape(await read_history(inner)) == expected.history, context
    assert not pending, f"{context}: scripted messages were left unsent"
    check_streams(await stream_contents(inner), expected.streams, context)
    return driver.fired


async def check_every_fault(
    clock: VirtualClock,
    scenario: Scenario,
    fresh: Callable[[], Awaitable[tuple[str, Any]]],
    expected: Reference,
    live_wait: float = 0.0,
) -> dict[str, int]:
    """Run :func:`check_recovery` at every call number with every fault kind.

    ``fresh`` gives each try its own workflow id and driver. Returns how many
    faults each kind of driver call took.
    """
    faulted: dict[str, int] = {}
    for at in range(1, expected.calls + 1):
        for kind in KINDS:
            workflow_id, driver = await fresh()
            fired = await check_recovery(
                clock, scenario, workflow_id, driver, expected, at, kind, live_wait
            )
            assert fired is not None, f"call {at} never happened"
            faulted[fired] = faulted.get(fired, 0) + 1
    return faulted
