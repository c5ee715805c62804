"""The one way the suite waits for something another thread or process does.

Both helpers poll ``predicate`` until it returns a true value, and return
that value. The timeout is a bound on the wait, never a timing assertion:
it is generous because the suite must pass on a busy machine, where a
server or a worker may answer several times slower than on a quiet one.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: Seconds between two checks: short enough not to slow a test down, long
#: enough not to load the machine (the predicate often queries the database).
INTERVAL = 0.05


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 60.0,
    what: str = "condition",
    interval: float = INTERVAL,
) -> T:
    """Call ``predicate`` until it returns a true value; return that value.

    Raise ``AssertionError`` naming ``what`` when ``timeout`` seconds pass first.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(interval)


async def await_for(
    predicate: Callable[[], T | Awaitable[T]],
    timeout: float = 60.0,
    what: str = "condition",
    interval: float = INTERVAL,
) -> T:
    """Like :func:`wait_for` inside an event loop (the loop keeps running).

    ``predicate`` may be a plain function or a coroutine function (e.g. a
    ``sync_to_async`` query).
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        await asyncio.sleep(interval)
