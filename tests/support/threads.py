"""Running test code in several threads at once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connections


def closing(function: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``function`` to close its thread's database connections after it.

    For work handed to a pool thread: a connection left open would keep the
    test database from being flushed or dropped.
    """

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        finally:
            connections.close_all()

    return run


def in_threads(
    work: Callable[[], object], count: int, timeout: float | None = None
) -> list[Exception]:
    """Run ``work()`` in ``count`` threads at once; return what they raised.

    Each thread closes its database connections when it ends: one left open
    would keep the test database from being flushed or dropped.
    """
    errors: list[Exception] = []

    def run() -> None:
        try:
            work()
        except Exception as exc:  # reported to the caller
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    return errors
