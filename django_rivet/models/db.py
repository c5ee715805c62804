"""The one database django-rivet's tables live in.

ORM queries on the runtime's models follow the project's database routers
by themselves; raw SQL, ``transaction.atomic()`` and ``on_commit`` must name
a connection. Everything in the runtime that names one asks this module,
which resolves the alias the routers give for writing the ``Actor`` model,
so a project that routes django-rivet's models to another database keeps
locks, state, KV, schedules, events and workflows in one transaction there.

System check ``rivet.E403`` refuses routers that split django-rivet's models
over several aliases (or read them from another alias than they write),
which no transaction could make atomic.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import connections, router, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.transaction import Atomic

from .actors import Actor

__all__ = [
    "alias",
    "atomic",
    "close_thread_connections",
    "connection",
    "in_atomic_block",
    "in_invocation",
    "invoking",
    "on_commit",
]

# True while an actor invocation's transaction is open in this context. That
# transaction belongs to the invoking thread; async handlers run on an event
# loop of their own, whose ORM calls hop back to that thread. Code outside
# the actor runtime that waits for database work (a workflow request, a
# queue send waiting for its reply) must hop back too, instead of waiting in
# another thread outside the transaction. The actor runtime sets it.
invoking: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "rivet_invoking", default=False
)


def alias() -> str:
    """Return the database alias of django-rivet's tables (via the routers)."""
    return router.db_for_write(Actor)


def connection() -> BaseDatabaseWrapper:
    """Return this thread's connection to django-rivet's database."""
    return connections[alias()]


def atomic(savepoint: bool = True) -> Atomic:
    """``transaction.atomic()`` on django-rivet's database."""
    return transaction.atomic(using=alias(), savepoint=savepoint)


def in_atomic_block() -> bool:
    """Tell whether this thread is inside a transaction on that database."""
    return bool(connection().in_atomic_block)


def on_commit(func: Callable[[], Any], robust: bool = True) -> None:
    """Run ``func`` after the current transaction on that database commits."""
    transaction.on_commit(func, using=alias(), robust=robust)


def in_invocation() -> bool:
    """Tell whether this context runs inside an actor invocation's transaction."""
    return invoking.get()


def close_thread_connections(pool: ThreadPoolExecutor, threads: int) -> None:
    """Close the database connections of each of the ``threads`` threads of ``pool``.

    Django's connections belong to the thread that opened them, so each
    thread must close its own. Jobs already running finish first; call this
    before dropping a database (e.g. at the end of a test session).
    """
    # Every job waits for all the others, so each runs in a thread of its own.
    barrier = threading.Barrier(threads, timeout=10)

    def close() -> None:
        connections.close_all()
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()

    for future in [pool.submit(close) for _ in range(threads)]:
        future.result()
