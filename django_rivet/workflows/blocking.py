"""Where a workflow driver's blocking work runs, and how its failures read.

The runtime runs each workflow on an event loop of its own in the worker's
thread (the Celery task's, the in-process worker's) and builds its driver
with ``private_loop=True``: database calls and synchronous step functions
then run right there, blocking only that private loop. The whole run uses
the worker thread's connection, a ``transaction=True`` step's ORM code
shares the transaction of its history entry, and no step pays for a
hand-off between threads (which costs scheduler latency on a busy machine,
several times per step). With ``private_loop=False`` (the default, for a
driver used from a shared event loop) the same calls go through
``sync_to_async(thread_sensitive=True)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from asgiref.sync import async_to_sync, sync_to_async
from django.db import Error as DatabaseError

from ..engine import StorageError

T = TypeVar("T")

_get_running_loop = asyncio.events._get_running_loop
_set_running_loop = asyncio.events._set_running_loop

__all__ = [
    "call",
    "call_sync_or_async",
    "off_the_loop",
    "run",
    "run_private",
    "run_storage",
    "storage_errors",
]


async def run(private_loop: bool, fn: Callable[..., Any], *args: Any) -> Any:
    """Run synchronous ``fn(*args)`` where a driver's database work runs."""
    if private_loop:
        return _off_the_loop(fn, args)
    return await sync_to_async(fn, thread_sensitive=True)(*args)


async def run_storage(private_loop: bool, fn: Callable[..., Any], *args: Any) -> Any:
    """``run(private_loop, storage_errors(fn), *args)``, in one call.

    A run's every database call (two a step) comes this way: on a private
    loop, without the wrapper's closure and frames.
    """
    if private_loop:
        return _off_the_loop(_reporting, (fn, args))
    return await sync_to_async(storage_errors(fn), thread_sensitive=True)(*args)


def _off_the_loop(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """:func:`off_the_loop` around ``fn(*args)``, spelled out: every step's
    calls come this way, and a generator's context manager costs more."""
    loop = _get_running_loop()
    _set_running_loop(None)
    try:
        return fn(*args)
    finally:
        _set_running_loop(loop)


def storage_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Report database failures as the engine's ``StorageError`` (retry later)."""

    def wrapper(*args: Any) -> Any:
        return _reporting(fn, args)

    return wrapper


def _reporting(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """Return ``fn(*args)``, a database failure raised as a ``StorageError``."""
    try:
        return fn(*args)
    except StorageError:
        raise
    except DatabaseError as exc:
        raise StorageError(f"Workflow storage failed: {exc}") from exc


@contextlib.contextmanager
def off_the_loop() -> Iterator[None]:
    """Run blocking code on a private loop's thread, outside the loop's run.

    Django refuses synchronous database access from a thread whose event loop
    is running, to protect shared loops. A run's loop is private to its
    worker thread, so blocking it is harmless: clear the running-loop marker
    for the duration of the call, exactly as if the loop had stopped.
    """
    loop = _get_running_loop()
    _set_running_loop(None)
    try:
        yield
    finally:
        _set_running_loop(loop)


async def call(fn: Callable[..., Any], *args: Any) -> Any:
    """Call ``fn(*args)`` on the loop (with ``async_to_sync``, from a thread)."""
    return fn(*args)


async def _await(awaitable: Any) -> Any:
    return await awaitable


def call_sync_or_async(fn: Callable[[], Any]) -> Any:
    """Call ``fn`` from synchronous code, running it to completion if async.

    An async function runs on a loop of asgiref's; its thread-sensitive ORM
    calls come back to this thread, into the caller's transaction.
    """
    if inspect.iscoroutinefunction(fn):
        return async_to_sync(fn)()
    output = fn()
    if inspect.isawaitable(output):
        output = async_to_sync(_await)(output)
    return output


# The event loop each thread runs its workflows on (run_private).
_loops = threading.local()


def run_private(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run engine code on an event loop private to this thread.

    Its driver (``private_loop=True``) does its database work inline, on this
    thread's connection and inside the caller's transaction if there is one.
    Call it from synchronous code (never from a thread running a loop).
    """
    # One loop per thread, reused run after run (a loop costs a socket pair);
    # a new one when that one is busy (engine code run from inside a run).
    loop: asyncio.AbstractEventLoop | None = getattr(_loops, "loop", None)
    if loop is None or loop.is_running() or loop.is_closed():
        loop = asyncio.new_event_loop()
        if getattr(_loops, "loop", None) is None:
            _loops.loop = loop
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        if loop is not getattr(_loops, "loop", None):
            loop.close()
