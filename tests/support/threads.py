"""Running test code in several threads at once."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connections


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


def run_in_background(workflow_id: str) -> threading.Thread:
    """Run a workflow to idle in a thread of its own, as a worker would.

    The caller joins the thread; it closes its database connections.
    """
    from django_rivet import workflows
    from django_rivet.testing import run_until_idle

    def work() -> None:
        try:
            run_until_idle(workflows.get(workflow_id))
        finally:
            connections.close_all()

    thread = threading.Thread(target=work)
    thread.start()
    return thread
