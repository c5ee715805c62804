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

The worker threads that reach that database outside a request (the
invocation threads, the WebSocket side's reads) are :class:`WorkerThreads`
pools: each job follows Django's connection rules, and
:func:`close_worker_connections` closes every pool's connections.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import (
    OperationalError,
    close_old_connections,
    connections,
    router,
    transaction,
)
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import DateTimeField, Field, Model
from django.db.transaction import Atomic

from .actors import Actor

__all__ = [
    "EVENT_THREADS",
    "WorkerThreads",
    "alias",
    "atomic",
    "autocommit",
    "bytes_pairs",
    "close_worker_connections",
    "connection",
    "in_atomic_block",
    "in_invocation",
    "invoking",
    "on_commit",
    "prep_save",
    "run_db",
    "wait_for_shared_cache_locks",
    "write_turn",
]

P = ParamSpec("P")
T = TypeVar("T")

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


def prep_save(
    field: Field[Any, Any], value: Any, connection: BaseDatabaseWrapper
) -> Any:
    """Return ``field.get_db_prep_save(value, connection)``, for raw SQL.

    An aware datetime (or None) of a ``DateTimeField`` goes straight to the
    backend's adapter: the field's own path checks for naive values and
    converts them first, which cost a tenth of a workflow's start.
    """
    if isinstance(field, DateTimeField) and (
        value is None or (isinstance(value, datetime) and value.tzinfo is not None)
    ):
        return connection.ops.adapt_datetimefield_value(value)
    return field.get_db_prep_save(value, connection)


# Per model and database alias: each concrete field's position, the
# parameters of a row of defaults, and the fields whose default is computed
# at each insert (insert_params).
_RowDefaults = tuple[dict[str, int], list[Any], list[tuple[int, "Field[Any, Any]"]]]
_row_defaults: dict[tuple[type[Model], str], _RowDefaults] = {}


def insert_params(
    model: type[Model], values: Mapping[str, Any], connection: BaseDatabaseWrapper
) -> list[Any]:
    """Return an INSERT's parameters: one per concrete field of ``model``.

    ``values`` (by field name) are prepared as the ORM saves them; every
    other field takes its default, prepared once per database when that is
    a constant (``list``/``dict`` defaults included: they prepare to the
    same JSON), or computed now when it is another callable. What
    ``model(**values)`` and each field's ``pre_save`` would give, without
    building the instance (a tenth of a workflow's start). Fields set on
    save (``auto_now``) are refused.
    """
    key = (model, connection.alias)
    found = _row_defaults.get(key)
    if found is None:
        found = _row_defaults[key] = _defaults(model, connection)
    positions, defaults, computed = found
    params = list(defaults)
    for index, field in computed:
        if field.name not in values:
            params[index] = prep_save(field, field.get_default(), connection)
    fields = model._meta.concrete_fields
    for name, value in values.items():
        index = positions[name]
        params[index] = prep_save(fields[index], value, connection)
    return params


def _defaults(model: type[Model], connection: BaseDatabaseWrapper) -> _RowDefaults:
    positions: dict[str, int] = {}
    defaults: list[Any] = []
    computed: list[tuple[int, Field[Any, Any]]] = []
    for index, field in enumerate(model._meta.concrete_fields):
        if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            raise TypeError(f"{field} is set on save: insert_params cannot prepare it")
        positions[field.name] = index
        default = field.default if field.has_default() else None
        if callable(default) and default not in (list, dict):
            computed.append((index, field))
            defaults.append(None)
        else:
            defaults.append(prep_save(field, field.get_default(), connection))
    return positions, defaults, computed


def autocommit(current: BaseDatabaseWrapper) -> bool:
    """Return ``current.get_autocommit()``, without its checks once connected.

    Django's method first ensures a connection, through its guard against
    async contexts (which raises and catches an exception each time): a
    step's write asked three times. Connected, the answer is the attribute
    it returns; the write's cursor still goes through the guard.
    """
    if current.connection is None:
        return current.get_autocommit()
    return bool(current.autocommit)


def kv_cursor(current: BaseDatabaseWrapper) -> CursorWrapper:
    """Return a cursor for the KV write path, kept on the connection.

    Making one (``connection.cursor()``: the async guard, the thread check,
    the wrapper) costs 8.7 us on SQLite, and a step's write is one
    statement. The cursor is kept while the connection is the one it was
    made on and query logging (``CaptureQueriesContext``, ``DEBUG``) is as
    it was; it goes through Django's wrapper all the same (execute
    wrappers, logging). Only for statements whose results are read whole
    (an unread SQLite result would keep its statement open).
    """
    raw, logged = current.connection, current.queries_logged
    kept = getattr(current, "_rivet_kv_cursor", None)
    if kept is not None and raw is not None and kept[0] is raw and kept[1] == logged:
        return kept[2]  # type: ignore[no-any-return]
    cursor = current.cursor()
    current._rivet_kv_cursor = (current.connection, logged, cursor)  # type: ignore[attr-defined]
    return cursor


def bytes_pairs(rows: list[Any]) -> list[tuple[bytes, bytes]]:
    """Return fetched ``(key, value)`` rows of two binary columns as bytes.

    SQLite and psycopg 3 give bytes already (a column's values all come
    through one adapter, so the first row tells); other adapters may not.
    """
    if rows and not (type(rows[0][0]) is bytes and type(rows[0][1]) is bytes):
        return [(bytes(key), bytes(value)) for key, value in rows]
    return rows


def in_atomic_block() -> bool:
    """Tell whether this thread is inside a transaction on that database."""
    return bool(connection().in_atomic_block)


def on_commit(func: Callable[[], Any], robust: bool = True) -> None:
    """Run ``func`` after the current transaction on that database commits."""
    transaction.on_commit(func, using=alias(), robust=robust)


def in_invocation() -> bool:
    """Tell whether this context runs inside an actor invocation's transaction."""
    return invoking.get()


# -- the worker threads django-rivet owns -------------------------------------------
# Every pool of them, so that close_worker_connections() reaches them all.
_pools: list[WorkerThreads] = []


def _with_clean_connections(job: Callable[[], T]) -> T:
    # What Django does around a request, and Channels around each
    # database_sync_to_async call: close connections older than CONN_MAX_AGE
    # or left unusable by an error (they reconnect on next use), and re-arm
    # CONN_HEALTH_CHECKS.
    close_old_connections()
    try:
        return job()
    finally:
        close_old_connections()


class WorkerThreads(ThreadPoolExecutor):
    """Worker threads that follow Django's connection rules around every job.

    Each job starts and ends with ``close_old_connections()``, as a request
    does. A pool registers itself: :func:`close_worker_connections` closes
    its threads' connections.
    """

    def __init__(self, threads: int, name: str) -> None:
        super().__init__(max_workers=threads, thread_name_prefix=name)
        self.threads = threads
        _pools.append(self)

    def submit(
        self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> Future[T]:
        """Schedule ``fn``, with ``close_old_connections()`` before and after."""
        job = functools.partial(fn, *args, **kwargs)
        return super().submit(_with_clean_connections, job)

    def close_connections(self) -> None:
        """Close the database connection of each thread of the pool.

        Django's connections belong to the thread that opened them, so each
        thread must close its own. Jobs already running finish first.
        """
        # Every job waits for all the others, so each runs in a thread of its own.
        barrier = threading.Barrier(self.threads, timeout=10)

        def close() -> None:
            connections.close_all()
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()

        for future in [self.submit(close) for _ in range(self.threads)]:
            future.result()


def close_worker_connections() -> None:
    """Close the database connections of every worker thread django-rivet owns.

    Worker threads keep their connection between jobs as long as
    ``CONN_MAX_AGE`` allows (``None`` or a number of seconds; Django's
    default 0 reconnects for every job, as it does for every request). Call
    this before dropping a database, e.g. at the end of a test session.
    """
    for pool in list(_pools):
        pool.close_connections()


# Database work of the WebSocket side (event-log reads of the streams and
# feeds, the heartbeat), with the same connection hygiene; in threads of
# their own, in parallel, so a slow read does not hold up the others.
EVENT_THREADS = 4
_event_threads = WorkerThreads(EVENT_THREADS, "rivet-events")


async def run_db(func: Callable[..., T], *args: Any) -> T:
    """Run ``func(*args)`` in a database thread (connections are checked first)."""
    call = sync_to_async(func, thread_sensitive=False, executor=_event_threads)
    result: T = await call(*args)
    return result


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


# -- SQLite: this process's writers in turn ----------------------------------------
# One lock per SQLite database (its alias) for this process's writers.
_turns: dict[str, threading.Lock] = {}
_turns_lock = threading.Lock()
_in_turn = threading.local()  # .alias: the turn this thread holds


def write_turn(current: BaseDatabaseWrapper | None = None) -> _WriteTurn:
    """Wait for this process's turn to write to SQLite; yield what ends it early.

    SQLite admits one writer at a time and queues nobody: a writer that
    finds the lock taken sleeps in the busy handler (1 ms, then 2, 5...)
    although the holder commits in a fraction of that. Writers of this
    process that take their turn here wait on a Python lock instead, and
    go as soon as the one before ends (a live wake: the send and the run's
    record of the step before, bench P6L). Writers that do not, and other
    processes, still meet SQLite's lock as before.

    Wrap the whole transaction; the turn ends when the block does, or
    earlier by calling what it yields (from an ``on_commit`` hook, say).
    Yields None, taking no turn, on PostgreSQL (its row locks queue) and
    inside a transaction: the caller may hold SQLite's lock already, and
    waiting here for a writer that waits for that lock would stall both
    until the busy timeout. ``current``: this thread's connection, when the
    caller holds it already (a workflow step's write: one lookup fewer).
    """
    return _WriteTurn(current)


class _WriteTurn:
    """One turn of :func:`write_turn`: a class, not a generator (a step's write
    enters one; a generator's context manager costs three times as much)."""

    __slots__ = ("_current", "_lock")

    def __init__(self, current: BaseDatabaseWrapper | None) -> None:
        self._current = current
        self._lock: threading.Lock | None = None

    def __enter__(self) -> Callable[[], None] | None:
        current = self._current
        if current is None:
            current = connection()
        if (
            current.vendor != "sqlite"
            or current.in_atomic_block
            or not autocommit(current)
            or getattr(_in_turn, "alias", None) == current.alias  # (already ours)
        ):
            return None
        lock = _turns.get(current.alias)
        if lock is None:
            with _turns_lock:
                lock = _turns.setdefault(current.alias, threading.Lock())
        lock.acquire()
        self._lock = lock
        _in_turn.alias = current.alias
        return self._end

    def _end(self) -> None:
        lock = self._lock
        if lock is not None:
            self._lock = None
            _in_turn.alias = None
            lock.release()

    def __exit__(self, *exc: object) -> None:
        self._end()
