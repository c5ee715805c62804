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
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import OperationalError, connections, router, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteDatabaseWrapper
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
    "wait_for_shared_cache_locks",
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


# -- SQLite in memory: wait for table locks as SQLite waits for file locks ----------
# Longest pause between two tries of a statement that found a table locked.
_MAX_LOCK_PAUSE = 0.05


def wait_for_shared_cache_locks(
    sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any
) -> None:
    """Make statements on an in-memory SQLite database wait for table locks.

    Connected to ``connection_created``. Django's test database for SQLite is
    in memory, shared by the process's connections through SQLite's shared
    cache (``file:memorydb_default?mode=memory&cache=shared``). There a
    statement that finds a table locked by another connection fails at once
    with "database table is locked" (``SQLITE_LOCKED_SHAREDCACHE``): the busy
    timeout applies to file locks only. Actions run in threads with
    connections of their own, so a test's socket and its actions, or two
    actors' calls, would fail depending on timing. Such a statement is tried
    again until the connection's ``timeout`` (``OPTIONS``, 5 s by default)
    runs out, as it would wait on a database file; then the error propagates
    (``actor/busy`` for an invocation). Databases on files are untouched.
    """
    if not isinstance(connection, SQLiteDatabaseWrapper):
        return
    if not connection.is_in_memory_db():
        return
    # connection_created fires at every reconnect of the same wrapper. Put
    # first, so that execute_wrapper() blocks (which pop the last) keep theirs.
    if _retry_locked_tables not in connection.execute_wrappers:
        connection.execute_wrappers.insert(0, _retry_locked_tables)


def _retry_locked_tables(
    execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
) -> Any:
    deadline: float | None = None
    pause = 0.001
    while True:
        try:
            return execute(sql, params, many, context)
        except OperationalError as exc:
            # An executemany() may have run some rows already: not retried.
            if many or not _table_locked(exc):
                raise
            now = time.monotonic()
            if deadline is None:
                timeout = context["connection"].settings_dict["OPTIONS"].get("timeout")
                deadline = now + (5.0 if timeout is None else float(timeout))
            if now >= deadline:
                raise
            time.sleep(min(pause, deadline - now))
            pause = min(pause * 2, _MAX_LOCK_PAUSE)


def _table_locked(exc: BaseException) -> bool:
    error = exc.__cause__ if exc.__cause__ is not None else exc
    name = getattr(error, "sqlite_errorname", None)
    return isinstance(name, str) and name.startswith("SQLITE_LOCKED")
