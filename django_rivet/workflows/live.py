"""The live window on the database: its in-process wake-ups, and shutdown.

With ``RIVET["WORKFLOW_LIVE_WAIT"]`` seconds, a run that begins a wait (a
message, a child, a short sleep) waits inside its coroutine for up to that
long, its history in memory and its lease kept by the heartbeat
(:mod:`django_rivet.engine.live`). What wakes it:

- **in process**, at once: a message sent (``handle.send``, ``send_many``,
  a driver's ``add_message``), a child ending, or a cancel, committed by
  this process, signals the runs of that workflow waiting here
  (:func:`signal`, after the commit, through ``loop.call_soon_threadsafe``
  into the run's own loop);
- **across processes**, by polling: the engine looks in the inbox (one
  indexed read, and one read of the row for a pending cancel) every
  ``WORKFLOW_POLL_INTERVAL`` seconds.

Why no ``LISTEN/NOTIFY`` or channel layer (yet): both cost a connection or
a subscription per waiting run (or a dispatcher thread per process), exist
on one database only (PostgreSQL) or need a channel layer a worker may not
have, and either way still need the poll, as a notification can be lost.
The in-process signal serves what shares a process (the embedded worker, a
worker whose workflows message each other or start children), the poll
everything else, bounded by the poll interval.

:func:`track` registers each live run, so a worker shutting down closes
their windows (:func:`end_all`): they unwind and yield as without the
window, at once. The in-process worker, which runs one item at a time,
closes them too when other work becomes due in this process
(:func:`make_room`): a parent would otherwise wait live for a child that
cannot run until it yields.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from .. import dispatch
from ..conf import rivet_settings
from ..engine import WorkflowRun
from ..models import db

__all__ = [
    "BUDGET_WINDOWS",
    "budget",
    "end_all",
    "listen",
    "make_room",
    "reopen",
    "signal",
    "signal_on_commit",
    "track",
    "window",
]


@dataclass(eq=False, slots=True)
class _Listener:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    names: frozenset[str] | None = field(default=None)


_lock = threading.Lock()
_listeners: dict[str, list[_Listener]] = {}
_runs: dict[WorkflowRun, asyncio.AbstractEventLoop] = {}
# How long one run may stay live in all, in windows (see budget()).
BUDGET_WINDOWS = 10

# Set by end_all(): the process is shutting down, no run opens a window.
_closing = threading.Event()


def window() -> float:
    """Return the live window of runs here, in seconds (0: off, or closing)."""
    if _closing.is_set():
        return 0.0
    return float(rivet_settings.WORKFLOW_LIVE_WAIT)


def budget(seconds: float) -> float:
    """Return how long a run with ``seconds`` of live window stays live in all.

    :data:`BUDGET_WINDOWS` windows from its first wait: a workflow whose
    messages keep coming within each window would otherwise hold its
    worker (and keep a shutting-down worker, or a deploy, waiting) for good.
    """
    return BUDGET_WINDOWS * seconds


async def listen(workflow_id: str, names: Iterable[str] | None) -> None:
    """Return once :func:`signal` is called for ``workflow_id`` with one of ``names``.

    ``names`` None takes any name; a signal without a name (a cancel) wakes
    every listener of the workflow.
    """
    loop = asyncio.get_running_loop()
    wanted = None if names is None else frozenset(names)
    listener = _Listener(loop, loop.create_future(), wanted)
    with _lock:
        _listeners.setdefault(workflow_id, []).append(listener)
    try:
        await listener.future
    finally:
        with _lock:
            found = _listeners.get(workflow_id)
            if found is not None:
                with contextlib.suppress(ValueError):
                    found.remove(listener)
                if not found:
                    del _listeners[workflow_id]


def signal(workflow_id: str, name: str | None = None) -> int:
    """Wake the runs of ``workflow_id`` waiting here for ``name``; return how many.

    Thread-safe: each listener is woken in its own loop.
    """
    with _lock:
        found = list(_listeners.get(workflow_id, ()))
    woken = 0
    for listener in found:
        if name is not None and listener.names is not None:
            if name not in listener.names:
                continue
        with contextlib.suppress(RuntimeError):  # its loop closed meanwhile
            listener.loop.call_soon_threadsafe(_resolve, listener.future)
            woken += 1
    return woken


def signal_on_commit(workflow_id: str, name: str | None = None) -> None:
    """Call :func:`signal` once the current transaction commits.

    Nothing to do while the window is off and no run here listens.
    """
    if rivet_settings.WORKFLOW_LIVE_WAIT <= 0 and not _listeners:
        return
    db.on_commit(lambda: signal(workflow_id, name), robust=True)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@contextlib.contextmanager
def track(run: WorkflowRun) -> Iterator[None]:
    """Register ``run`` (in the running loop) for :func:`end_all` while it runs."""
    loop = asyncio.get_running_loop()
    with _lock:
        _runs[run] = loop
    if _closing.is_set():  # end_all() came between its window() and here
        run.end_live()
    try:
        yield
    finally:
        with _lock:
            _runs.pop(run, None)


def reopen() -> None:
    """Let runs open live windows again after :func:`end_all` (tests)."""
    _closing.clear()


def make_room(job: str, args: list[object]) -> int:
    """Work is due in this process's worker: close the windows it waits behind.

    The in-process worker (embedded, ``rivet_worker``) runs one thing at a
    time: a run waiting live there would hold up every other due item --
    the child it waits for among them. So the windows of the runs here
    close (they yield as without the window), but the one of the workflow
    the work is for (a message to the live run itself). Returns how many.
    """
    if not _runs:
        return 0
    keep = args[0] if job == "run_workflow" and args else None
    with _lock:
        runs = [(run, loop) for run, loop in _runs.items() if run.workflow_id != keep]
    for run, loop in runs:
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(run.end_live)
    return len(runs)


def end_all() -> int:
    """Close the live window of every run of this process; return how many.

    What a worker shutting down calls: each run waiting in its window
    unwinds at once and yields as without the window (the next run, on any
    worker, replays), and no later run of this process opens one (a run
    made due again by what arrived in its window replays and yields at
    once), until :func:`reopen`.
    """
    _closing.set()
    with _lock:
        runs = list(_runs.items())
    for run, loop in runs:
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(run.end_live)
    return len(runs)


# The in-process worker tells of work due now (dispatch.WorkerBackend).
dispatch.on_worker_wake(make_room)
