"""The live window: a run that begins a wait keeps its coroutine a while.

With ``live_wait`` seconds (a :class:`~.runner.WorkflowRun` option; the
Django host's ``RIVET["WORKFLOW_LIVE_WAIT"]``), a message wait
(``ctx.messages.next``/``next_batch``), a wait for a child (``ctx.child``,
``ctx.wait_first``) or a sleep ending within the window waits *in process*
instead of unwinding: the run keeps its coroutine and its in-memory history
(``Storage``), the host keeps its lease. What the wait waits for is looked
for again each time the driver's ``wait_for_messages(names)`` returns (a
message or a child's end signalled in process: a hint, it may return for
nothing) and every ``worker_poll_interval`` seconds (what another process
sent); once found, the workflow goes on from where it stands, without
reloading or replaying its history.

Before it blocks, the run flushes what others could see (an event, stream
values) and a message wait's deadline, as a pause would; the pending entry
of a wait without a deadline is written only if it unwinds (a crash
meanwhile replays it, as a crash mid-run does). It unwinds exactly as
without the window -- the wait's own interrupt, the pause flushing the
history, the next run replaying -- when the window ends (``live_wait``
seconds after the wait began) or when the host closes it
(:meth:`LiveWindow.close`: a worker shutting down). An eviction (a lease
lost, a deadline, ``WorkflowRun.evict``/``cancel``) stops it as it stops
any entry (``EvictedError``). A driver offering ``check_cancel`` is asked
after each wake-up that found nothing to take (a cancel signals the run
too), so a cancel requested meanwhile fences the run out as it would before
a step; a wake-up that found a message goes on to the next step, which asks
before its function.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from django_rivet import clock

from .driver import EngineDriver
from .errors import EvictedError
from .flush import driver_call
from .storage import Storage

__all__ = ["LiveWait", "LiveWindow", "sleep", "wait_for"]

T = TypeVar("T")


class Run(Protocol):
    """What a live wait needs of the run (``execution.Run``)."""

    driver: EngineDriver
    storage: Storage
    eviction: asyncio.Event | None
    check_cancel: Callable[[], Awaitable[None]] | None

    @property
    def live(self) -> LiveWindow | None:
        """The run's live window."""

    def evicted(self) -> bool:
        """Whether the host asked the run to stop."""


@dataclass(frozen=True, slots=True)
class LiveWait:
    """One wait blocked in a live window: for ``names`` (None: any message;
    empty: a sleep), until ``until`` (the window's end or the wait's deadline).
    """

    names: tuple[str, ...] | None
    until: float


class LiveWindow:
    """The live window of one run: how long, and what waits in it now.

    ``waiting`` lists the waits blocked now (a host or a test can see that
    the run sits in its window: ``blocked`` is set meanwhile); ``wakes``
    counts the waits that went on in process, ``unwound`` those that ended
    with the window.

    ``budget`` (seconds, None: no bound) bounds how long the run stays live
    in all, from its first wait: a workflow whose messages keep coming
    within each window would otherwise hold its worker for good. Past it,
    every wait unwinds as past its window.
    """

    def __init__(self, seconds: float, budget: float | None = None) -> None:
        if not seconds > 0:
            raise ValueError(f"A live window lasts a positive time, not {seconds!r}")
        self.seconds = float(seconds)
        self.budget = None if budget is None else float(budget)
        self.began: float | None = None  # clock time of the first wait
        self.closed = asyncio.Event()
        self.blocked = asyncio.Event()
        self.waiting: list[LiveWait] = []
        self.wakes = 0
        self.unwound = 0

    def close(self) -> None:
        """End the window now: every wait in it unwinds as past its end."""
        self.closed.set()

    def covers(self, seconds: float) -> bool:
        """Tell whether a wait of ``seconds`` fits in the window."""
        if self.closed.is_set() or seconds > self.seconds:
            return False
        return clock.now() + seconds <= self.end()

    def begin(self) -> None:
        """Note that a wait begins (the first starts the budget)."""
        if self.began is None:
            self.began = clock.now()

    def end(self) -> float:
        """Return when the budget runs out (infinity: never)."""
        if self.budget is None or self.began is None:
            return float("inf")
        return self.began + self.budget


async def wait_for(
    run: Run,
    names: list[str] | None,
    deadline: float | None,
    check: Callable[[], Awaitable[T]],
) -> T:
    """Look with ``check()`` until it finds something (truthy) or the wait ends.

    ``names``: the message names the wait takes (None: any), as the driver's
    ``wait_for_messages`` takes them (a child's end is ``child:<id>``).
    Returns what ``check()`` returned last: falsy when the window ended, the
    host closed it, or ``deadline`` passed first (the caller unwinds or
    times out as it would have without the window). Raises
    :class:`EvictedError` when the run is evicted.
    """
    window = run.live
    assert window is not None
    driver = run.driver
    window.begin()
    until = min(clock.now() + window.seconds, window.end())
    if deadline is not None:
        until = min(until, deadline)
    listen = getattr(driver, "wait_for_messages", None)
    waiting = LiveWait(None if names is None else tuple(names), until)
    first = True
    while True:
        signal = None
        if listen is not None:
            # Listening before looking: what arrives after the look is heard.
            signal = asyncio.ensure_future(
                driver_call(listen(names), "wait for messages")
            )
            await asyncio.sleep(0)
        try:
            found = await check()
            if found:
                if not first:
                    window.wakes += 1
                return found
            if not first and run.check_cancel is not None:
                # A wake that found nothing may be a cancel's. (One that
                # found what it waits for goes on: a step asks before its
                # function, and a host fences its writes against a cancel.)
                await driver_call(run.check_cancel(), "cancel check")
            now = clock.now()
            if now >= until or window.closed.is_set():
                if window.closed.is_set() or deadline is None or now < deadline:
                    window.unwound += 1  # else the wait's own deadline passed
                return found
            if run.evicted():
                raise EvictedError()
            if first and (deadline is not None or run.storage.unshown):
                # What the run did before the wait is seen while it waits
                # (an event, stream values), as a pause shows it, and a
                # timeout's deadline is durable (a crash keeps it).
                await run.storage.flush()
            poll = min(until, now + driver.worker_poll_interval)
            await _block(run, window, waiting, poll, signal)
        finally:
            if signal is not None:
                signal.cancel()  # (no-op once done)
                await asyncio.gather(signal, return_exceptions=True)
        first = False
        if run.evicted():
            raise EvictedError()


async def sleep(run: Run, deadline: float) -> bool:
    """Sleep in the live window until ``deadline``; False if it was closed first.

    Raises :class:`EvictedError` when the run is evicted. A cancel is
    looked for at every poll, as a message wait does.
    """
    window = run.live
    assert window is not None
    driver = run.driver
    waiting = LiveWait((), deadline)
    window.begin()
    await run.storage.flush()  # what came before is seen meanwhile
    while True:
        now = clock.now()
        if now >= deadline:
            window.wakes += 1
            return True
        if window.closed.is_set() or now >= window.end():
            window.unwound += 1
            return False
        if run.evicted():
            raise EvictedError()
        poll = min(deadline, now + driver.worker_poll_interval, window.end())
        await _block(run, window, waiting, poll, None)
        if run.evicted():
            raise EvictedError()
        if run.check_cancel is not None and clock.now() < deadline:
            await driver_call(run.check_cancel(), "cancel check")


async def _block(
    run: Run,
    window: LiveWindow,
    waiting: LiveWait,
    until: float,
    signal: asyncio.Future[Any] | None,
) -> None:
    """Block until ``until``, the signal, the window's close or an eviction."""
    helpers = [
        asyncio.ensure_future(clock.wait_until(until)),
        asyncio.ensure_future(window.closed.wait()),
    ]
    if run.eviction is not None:
        helpers.append(asyncio.ensure_future(run.eviction.wait()))
    waits: set[asyncio.Future[Any]] = set(helpers)
    if signal is not None:
        waits.add(signal)
    window.waiting.append(waiting)
    window.blocked.set()
    try:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        window.waiting.remove(waiting)
        if not window.waiting:
            window.blocked.clear()
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
    if signal is not None and signal in done:
        signal.result()  # a failed driver call stops the run
