"""Per-process caps on workflow queues: ``worker_concurrency``.

A queue's ``worker_concurrency`` bounds how many of its workflows one
process runs at once -- the threads of a Celery worker with a thread or
gevent pool, the in-process worker -- on top of the queue-wide limits
admission enforces across all processes. A run that would go over it in
this process does not claim the workflow: it is made due a moment later
(:data:`DEFER_SECONDS`), for any process with room.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from .. import clock
from ..models import Workflow, db
from . import queues
from .wakeups import schedule_wake, wake_fields

logger = logging.getLogger("django_rivet.workflows")

__all__ = ["DEFER_SECONDS", "defer", "running", "slot"]

DEFER_SECONDS = 0.5

_running: dict[str, int] = {}
_lock = threading.Lock()


def running(queue: str) -> int:
    """Return how many workflows of ``queue`` this process runs now."""
    with _lock:
        return _running.get(queue, 0)


@contextlib.contextmanager
def slot(workflow_id: str) -> Iterator[bool]:
    """Hold one of this process's places for ``workflow_id``'s queue.

    Yields False when its queue's ``worker_concurrency`` is reached here
    (the caller must not run it); True otherwise, also for a workflow of no
    capped queue, whose run this does not count.
    """
    caps = {
        name: config.worker_concurrency
        for name, config in queues.configured().items()
        if config.worker_concurrency is not None
    }
    queue = ""
    if caps:
        found = Workflow.objects.filter(pk=workflow_id).values_list("queue").first()
        queue = found[0] if found else ""
    cap = caps.get(queue)
    if cap is None:
        yield True
        return
    with _lock:
        taken = _running.get(queue, 0) < cap
        if taken:
            _running[queue] = _running.get(queue, 0) + 1
    try:
        yield taken
    finally:
        if taken:
            with _lock:
                _running[queue] -= 1


def defer(workflow_id: str) -> None:
    """Make a due workflow due again shortly, for a process with room."""
    now = clock.now_datetime()
    later = clock.to_datetime(clock.now() + DEFER_SECONDS)
    with db.atomic():
        rows = Workflow.objects.due(now).filter(pk=workflow_id)
        if rows.update(wake_at=later, **wake_fields(later)):
            schedule_wake(workflow_id, later)
    logger.debug("workflow deferred: its queue is full here workflow=%s", workflow_id)
