"""Running test code in several threads at once."""

from __future__ import annotations

import threading
import time
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
    return in_threads_each([work] * count, timeout)


def in_threads_each(
    works: list[Callable[[], object]], timeout: float | None = None
) -> list[Exception]:
    """Run each of ``works`` in a thread of its own, at once; return what raised.

    A thread still running after ``timeout`` seconds is reported as a
    ``TimeoutError`` (the test fails instead of waiting for it).
    """
    errors: list[Exception] = []

    def runner(work: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except Exception as exc:  # reported to the caller
                errors.append(exc)
            finally:
                connections.close_all()

        return run

    threads = [threading.Thread(target=runner(work), daemon=True) for work in works]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        if thread.is_alive():
            errors.append(TimeoutError(f"a thread still runs after {timeout} s"))
    return errors


FINISHED = ("completed", "failed", "cancelled")


def run_in_background(workflow_id: str, *, retry_for: float = 0) -> threading.Thread:
    """Run a workflow to idle in a thread of its own, as a worker would.

    With ``retry_for`` (seconds), a run that broke on storage trouble (the
    workflow released for a retry: ``retry_count`` counted) is run again once it
    is due, as a worker would, until the workflow finishes or the time is up.
    The caller joins the thread; it closes its database connections.
    """
    from django_rivet import workflows
    from django_rivet.models import Workflow
    from django_rivet.testing import run_until_idle

    def work() -> None:
        deadline = time.monotonic() + retry_for
        try:
            status = run_until_idle(workflows.get(workflow_id))
            while status not in FINISHED and time.monotonic() < deadline:
                retried = Workflow.objects.filter(pk=workflow_id, retry_count__gt=0)
                if not retried.exists():
                    break  # it waits for something else: idle, as asked
                time.sleep(0.2)
                status = run_until_idle(workflows.get(workflow_id))
        finally:
            connections.close_all()

    thread = threading.Thread(target=work)
    thread.start()
    return thread
