"""The in-process worker: run due work and sweeps without Celery.

One loop serves two uses:

- ``manage.py rivet_worker``: a process of its own, for development or small
  deployments without Celery;
- the **embedded worker** (``RIVET["EMBEDDED_WORKER"] = True``): the same loop
  on a background thread of the web process, so ``make run`` needs one
  process. Events broadcast by fired actions then reach browsers through the
  in-memory channel layer, which only spans one process.

The loop runs every kind of due work of :data:`DUE_WORK` (schedules, cron,
queues, scheduled workflows, workflow queues, workflows), sweeps every
``SWEEP_INTERVAL`` seconds, and otherwise sleeps until the next
due time, at most ``poll_interval`` seconds -- work created in this process
wakes it at once (the ``worker`` dispatch backend,
:func:`django_rivet.dispatch.notify_worker`).

The embedded worker starts once per process, with the first request the
server handles (Django's ``request_started``, or :class:`EmbeddedWorkerApp`
around an ASGI application, which also starts it on ASGI lifespan startup),
and stops at exit. It never starts unless the setting is on.
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.core.signals import request_started
from django.db import close_old_connections, connections

from .. import clock, dispatch
from ..actors.errors import (
    caused_by_missing_table,
    migration_advice,
    missing_table_name,
)
from ..conf import rivet_settings
from ..scheduling import due
from ..scheduling.cron_runs import run_due_cron
from ..scheduling.queue_delivery import deliver_due_queues
from ..scheduling.schedule_runs import fire_due_schedules
from ..signals import socket_opened
from ..workflows import execution, live, scheduled, wakeups
from ..workflows import queues as workflow_queues
from . import sweeper

logger = logging.getLogger("django_rivet.worker")

__all__ = [
    "DUE_WORK",
    "DueWork",
    "EmbeddedWorkerApp",
    "Worker",
    "connect_embedded_worker",
    "due_work",
    "embedded_worker_running",
    "next_due_at",
    "run_due_work",
    "start_embedded_worker",
    "stop_embedded_worker",
]

DEFAULT_POLL_INTERVAL = 1.0
DEFAULT_BATCH = 100
# Shortest idle sleep: work can be due yet not runnable here (a queue whose
# head another process holds), and the loop must not spin on it.
MIN_IDLE_DELAY = 0.02


@dataclass(frozen=True, slots=True)
class DueWork:
    """A kind of due work the worker runs in-process.

    ``run(limit)`` runs up to ``limit`` items due now and returns how many
    ran; ``next_due()`` returns when the next one is due (epoch seconds), or
    ``None``, so the loop can sleep until then.
    """

    name: str
    run: Callable[[int], int]
    next_due: Callable[[], float | None] | None = None


# Every kind of due work, in the order a round runs them. Each lambda looks
# its function up when it runs, so a test can replace one.
DUE_WORK: tuple[DueWork, ...] = (
    DueWork(
        "schedules", lambda limit: fire_due_schedules(limit=limit), due.next_due_at
    ),
    DueWork("cron", lambda limit: run_due_cron(limit=limit)),
    DueWork("queues", lambda limit: deliver_due_queues(limit=limit)),
    DueWork(
        "workflow_schedules",
        lambda limit: scheduled.run_due_ticks(limit),
        lambda: scheduled.next_tick_due(),
    ),
    DueWork(
        "workflow_queues",
        lambda limit: workflow_queues.admit_due(limit),
        lambda: workflow_queues.next_admission_at(),
    ),
    DueWork(
        "workflows",
        lambda limit: execution.run_due(limit=limit),
        lambda: wakeups.next_due_at(),
    ),
)


def due_work() -> list[DueWork]:
    """Return the kinds of due work, in order."""
    return list(DUE_WORK)


def run_due_work(limit: int = DEFAULT_BATCH) -> int:
    """Run one round of every kind of due work; return how many items ran."""
    return sum(work.run(limit) for work in due_work())


def next_due_at() -> float | None:
    """Return the earliest due time any kind of work reports."""
    times = [work.next_due() for work in due_work() if work.next_due is not None]
    found = [t for t in times if t is not None]
    return min(found) if found else None


class Worker:
    """Run due work and sweeps in this process until stopped."""

    def __init__(
        self,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        sweep_interval: float | None = None,
        batch: int = DEFAULT_BATCH,
    ) -> None:
        self.poll_interval = poll_interval
        self.sweep_interval = sweep_interval
        self.batch = batch
        self._last_sweep: float | None = None

    def run_once(self) -> int:
        """Run due work once (and a sweep when one is due); return items run."""
        ran = run_due_work(self.batch)
        interval = self.sweep_interval
        if interval is None:
            interval = rivet_settings.SWEEP_INTERVAL
        now = time.monotonic()
        if self._last_sweep is None or now - self._last_sweep >= interval:
            self._last_sweep = now
            sweeper.sweep()
        return ran

    def _idle_delay(self) -> float:
        delay = self.poll_interval
        due = next_due_at()
        if due is not None:
            delay = min(delay, max(due - clock.now(), MIN_IDLE_DELAY))
        return delay

    def run(self, stop: threading.Event) -> None:
        """Loop until ``stop`` is set."""
        logger.info("worker started poll_interval=%s", self.poll_interval)
        # True from the first iteration that finds a table missing until one
        # succeeds: the episode is logged once, not at every poll.
        missing_tables = False
        try:
            while not stop.is_set():
                # Cleared before looking for work, so a notify() arriving
                # while this iteration runs cuts the next sleep short.
                dispatch.clear_worker_wakeup()
                try:
                    # Like a request: drop broken or expired connections.
                    close_old_connections()
                    ran = self.run_once()
                    if missing_tables:
                        missing_tables = False
                        logger.info("worker found its tables, resuming")
                    if ran:
                        continue
                    delay = self._idle_delay()
                except Exception as exc:
                    missing = caused_by_missing_table(exc)
                    if missing is None:
                        logger.exception("worker iteration failed")
                    elif not missing_tables:
                        missing_tables = True
                        table = missing_table_name(missing)
                        logger.error(
                            "worker: a database table is missing: %s; %s; "
                            "retrying every %ss until it is there",
                            table or missing,
                            migration_advice(table),
                            self.poll_interval,
                        )
                    delay = self.poll_interval
                dispatch.wait_for_work(delay)
        finally:
            connections.close_all()
            logger.info("worker stopped")


# -- the embedded worker --------------------------------------------------------------
_embedded_lock = threading.Lock()
_embedded: tuple[threading.Thread, threading.Event] | None = None


def start_embedded_worker() -> bool:
    """Start the embedded worker thread if the setting is on and it is not.

    Returns whether this call started it. Safe to call on every request.
    """
    global _embedded
    if _embedded is not None or not rivet_settings.EMBEDDED_WORKER:
        return False
    with _embedded_lock:
        if _embedded is not None:
            return False
        stop = threading.Event()
        live.reopen()  # (a worker stopped earlier in this process closed them)
        thread = threading.Thread(
            target=Worker().run, args=(stop,), name="rivet-embedded-worker", daemon=True
        )
        _embedded = (thread, stop)
        thread.start()
    _stop_with_the_server()
    logger.info("embedded worker started")
    return True


def _stop_with_the_server() -> None:
    # atexit alone is too late: by then the interpreter refuses new threads
    # and futures, which after-commit work of a run in progress needs. Under
    # daphne, stop when the Twisted reactor starts shutting down.
    reactor = sys.modules.get("twisted.internet.reactor")
    if reactor is not None and getattr(reactor, "running", False):
        reactor.callFromThread(
            reactor.addSystemEventTrigger, "before", "shutdown", stop_embedded_worker
        )
    atexit.register(stop_embedded_worker)


def stop_embedded_worker(timeout: float = 10.0) -> None:
    """Stop the embedded worker, letting the item in progress finish."""
    global _embedded
    with _embedded_lock:
        running, _embedded = _embedded, None
    if running is None:
        return
    thread, stop = running
    stop.set()
    dispatch.notify_worker()
    live.end_all()  # a run waiting in its live window yields now
    thread.join(timeout)


def embedded_worker_running() -> bool:
    """Tell whether this process runs the embedded worker."""
    running = _embedded
    return running is not None and running[0].is_alive()


def _on_request_started(sender: Any, **kwargs: Any) -> None:
    if _embedded is None:
        start_embedded_worker()


def connect_embedded_worker() -> None:
    """Start the embedded worker with the first HTTP request or WebSocket.

    Called at app ready. (``EmbeddedWorkerApp`` in the project's asgi.py
    starts it earlier still, on the ASGI lifespan startup where the server
    sends one.)
    """
    request_started.connect(
        _on_request_started, dispatch_uid="django_rivet.embedded_worker"
    )
    socket_opened.connect(
        _on_request_started, dispatch_uid="django_rivet.embedded_worker_socket"
    )


class EmbeddedWorkerApp:
    """ASGI wrapper running the embedded worker alongside the server.

    Starts it on lifespan startup (uvicorn, hypercorn) and stops it on
    shutdown; servers without lifespan support (daphne) start it with the
    first connection, HTTP or WebSocket. Does nothing unless
    ``RIVET["EMBEDDED_WORKER"]`` is on.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Handle lifespan events here; pass everything else to the app."""
        if scope["type"] != "lifespan":
            if _embedded is None:
                start_embedded_worker()
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                start_embedded_worker()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await sync_to_async(stop_embedded_worker, thread_sensitive=False)()
                await send({"type": "lifespan.shutdown.complete"})
                return
