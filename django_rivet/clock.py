"""The one time source of django-rivet.

Every timing decision (schedules, cron, workflow sleeps and retry backoffs,
leases, idle eviction) reads :func:`now`. Tests replace it with a
:class:`VirtualClock` through :func:`django_rivet.testing.freeze_time`, so no
test ever waits for a real timer. This module imports nothing from Django: the
workflow engine core depends on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from datetime import datetime as _datetime

__all__ = [
    "VirtualClock",
    "as_seconds",
    "freeze_time",
    "now",
    "now_datetime",
    "to_datetime",
    "to_timestamp",
    "wait_until",
]

_virtual: VirtualClock | None = None


def now() -> float:
    """Return the current time as epoch seconds (virtual when frozen)."""
    clock = _virtual
    return clock.now() if clock is not None else time.time()


def now_datetime() -> datetime:
    """Return :func:`now` as an aware UTC datetime."""
    return to_datetime(now())


def to_datetime(timestamp: float) -> datetime:
    """Convert epoch seconds to an aware UTC datetime."""
    return datetime.fromtimestamp(timestamp, UTC)


def to_timestamp(value: datetime) -> float:
    """Convert an aware datetime (naive means UTC) to epoch seconds."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def as_seconds(value: object) -> float | None:
    """Return a duration, a number of seconds or a timedelta, in seconds.

    None for anything else (booleans too): the caller says what it expected.
    """
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


async def wait_until(deadline: float) -> None:
    """Wait until :func:`now` reaches ``deadline``.

    Under a virtual clock this returns as soon as ``advance()`` moves the clock
    past the deadline, whatever thread or event loop calls ``advance()``.
    """
    clock = _virtual
    if clock is not None:
        await clock.wait_until(deadline)
        return
    delay = deadline - time.time()
    if delay > 0:
        await asyncio.sleep(delay)


class VirtualClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float | datetime | None = None) -> None:
        if start is None:
            start = time.time()
        elif isinstance(start, datetime):
            start = to_timestamp(start)
        self._now = float(start)
        self._lock = threading.Lock()
        # Waiters from any event loop: (deadline, loop, future).
        self._waiters: list[
            tuple[float, asyncio.AbstractEventLoop, asyncio.Future[None]]
        ] = []

    def now(self) -> float:
        """Return the virtual time in epoch seconds."""
        return self._now

    def datetime(self) -> _datetime:
        """Return the virtual time as an aware UTC datetime."""
        return to_datetime(self._now)

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds`` and wake due waiters."""
        if seconds < 0:
            raise ValueError("A clock cannot go backwards.")
        return self.set(self._now + seconds)

    def set(self, timestamp: float | _datetime) -> float:
        """Jump to ``timestamp`` (not earlier than now) and wake due waiters."""
        if isinstance(timestamp, _datetime):
            timestamp = to_timestamp(timestamp)
        with self._lock:
            if timestamp < self._now:
                raise ValueError("A clock cannot go backwards.")
            self._now = float(timestamp)
            due = [w for w in self._waiters if w[0] <= self._now]
            self._waiters = [w for w in self._waiters if w[0] > self._now]
        for _, loop, future in due:
            with contextlib.suppress(RuntimeError):  # the waiter's loop is closed
                loop.call_soon_threadsafe(_resolve, future)
        return self._now

    async def wait_until(self, deadline: float) -> None:
        """Wait until the virtual time reaches ``deadline``."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if deadline <= self._now:
                return
            entry = (deadline, loop, future)
            self._waiters.append(entry)
        try:
            await future
        finally:
            with self._lock:
                if entry in self._waiters:
                    self._waiters.remove(entry)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@contextlib.contextmanager
def freeze_time(start: float | datetime | None = None) -> Iterator[VirtualClock]:
    """Replace :func:`~django_rivet.clock.now` by a virtual clock within the block."""
    global _virtual
    previous = _virtual
    clock = VirtualClock(start)
    _virtual = clock
    try:
        yield clock
    finally:
        _virtual = previous
