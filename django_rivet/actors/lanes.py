"""Lanes: one actor's calls from this process's async callers.

:func:`ainvoke` is the async entry to the one invocation path
(:func:`~django_rivet.actors.spine.invoke`). Calls of async callers to one
actor queue in this process's lane of that actor and run one at a time in a
worker thread of :data:`~django_rivet.actors.spine.executor`. Calls that
queued while another ran are served together in one transaction, each in a
savepoint of its own (a failing call rolls back alone), and answered once it
commits: one commit for a burst of calls to a popular actor instead of one
each (bench P12). Read-only actions of an actor loaded in this process skip
the lane: a few run at once, the others share read-only rounds
(:func:`_aread`, bench P17). Sync callers (Celery tasks, the embedded
worker, the shell) call :func:`~django_rivet.actors.spine.invoke` directly.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.db import Error as DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import events
from ..conf import rivet_settings
from ..exceptions import ActorBusy
from ..models import db, sql
from . import reads
from .calls import INTERNAL, Origin
from .errors import database_error, is_connection_failure
from .invocation import Operation, action_timeout, current_invocation
from .reads import is_read_only_call, is_warm
from .rows import ActorRef
from .spine import bound_lock_wait, executor, invoke, invoke_since

logger = logging.getLogger("django_rivet.actors")

__all__ = ["BATCH_SECONDS", "MAX_BATCH", "MAX_READ_BATCH", "READ_SLOTS", "ainvoke"]


async def ainvoke(
    ref: ActorRef, operation: Operation, origin: Origin = INTERNAL
) -> Any:
    """Async :func:`invoke`: runs in a worker thread, in the actor's lane.

    Calls of async callers to one actor queue in this process's lane of
    that actor and run one at a time in a worker thread (never in the
    single thread-sensitive thread, so one actor awaiting I/O does not stall
    the rest). Calls that queued while another ran are served together in
    one transaction, each in a savepoint of its own, and answered once it
    commits (see :func:`_run_lane`). The time limit of a call counts from
    when it queued, as it counts the wait for the lock otherwise.

    Inside an invocation (an async handler calling another actor) it runs in
    the invoking thread instead, so the call joins that transaction. A
    read-only action (:mod:`.reads`) skips the lane: it runs at once, in a
    worker thread of its own, beside the lane's writes.
    """
    if current_invocation() is not None:
        return await sync_to_async(invoke, thread_sensitive=True)(
            ref, operation, origin
        )
    if is_read_only_call(ref, operation):
        # A read-only action takes no lock: it never queues behind the
        # actor's writes (see _aread).
        if not is_warm(ref):
            return await sync_to_async(
                invoke_since, thread_sensitive=False, executor=executor
            )(ref, operation, origin, time.monotonic())
        return await _aread(ref, operation, origin)
    loop = asyncio.get_running_loop()
    key = (loop, _lane_key(ref))
    lane = _lanes.get(key)
    if lane is None:
        lane = _lanes[key] = _Lane()
    call = _Call.waiting(loop, ref, operation, origin)
    lane.calls.append(call)
    if lane.server is None:
        lane.server = loop.create_task(_serve(key, lane))
    return await call.future


# -- lanes: one actor's calls from this process's async callers ----------------------
# Calls one transaction serves at most, and the time after which it takes no
# more: they bound how long the actor's row stays locked for other processes.
MAX_BATCH = 16
BATCH_SECONDS = 0.25


@dataclass(slots=True, eq=False)
class _Call:
    ref: ActorRef
    operation: Operation
    origin: Origin
    context: contextvars.Context
    future: asyncio.Future[Any]
    queued: float  # monotonic

    @classmethod
    def waiting(
        cls,
        loop: asyncio.AbstractEventLoop,
        ref: ActorRef,
        operation: Operation,
        origin: Origin,
    ) -> _Call:
        """A call made now, in the caller's context, answered on ``loop``."""
        return cls(
            ref,
            operation,
            origin,
            contextvars.copy_context(),
            loop.create_future(),
            time.monotonic(),
        )


@dataclass(slots=True, eq=False)
class _Lane:
    calls: deque[_Call] = field(default_factory=deque)
    server: asyncio.Task[None] | None = None


# Lanes by (event loop, actor): touched only from the loop's own thread
# (the worker thread only pops calls from a lane's deque).
_lanes: dict[tuple[asyncio.AbstractEventLoop, Any], _Lane] = {}


def _lane_key(ref: ActorRef) -> Any:
    return ref.actor_id if ref.actor_id is not None else (ref.name, ref.key)


async def _serve(key: tuple[asyncio.AbstractEventLoop, Any], lane: _Lane) -> None:
    """Run the lane's calls, round after round, until none is queued."""
    loop = key[0]
    try:
        while lane.calls:
            outcomes = await sync_to_async(
                _run_lane, thread_sensitive=False, executor=executor
            )(lane, loop)
            for call, ok, value in outcomes:
                if call.future.done():  # the caller went away (cancelled)
                    continue
                if ok:
                    call.future.set_result(value)
                else:
                    call.future.set_exception(value)
    except BaseException as exc:  # pragma: no cover - a bug here must not hang
        for call in lane.calls:
            if not call.future.done():
                call.future.set_exception(exc)
        lane.calls.clear()
        raise
    finally:
        lane.server = None
        if not lane.calls:
            _lanes.pop(key, None)


_Outcome = tuple[_Call, bool, Any]


def _take(lane: _Lane) -> _Call | None:
    """Pop the next call whose caller still waits."""
    while True:
        try:
            call = lane.calls.popleft()
        except IndexError:
            return None
        if not call.future.cancelled():
            return call


def _run_lane(lane: _Lane, loop: asyncio.AbstractEventLoop) -> list[_Outcome]:
    """Serve the calls queued in ``lane`` (in a worker thread).

    One call: an ordinary :func:`invoke`. Several: one transaction, each
    call a nested invocation (a savepoint: a failing call rolls back alone),
    taking calls queued meanwhile up to :data:`MAX_BATCH` or
    :data:`BATCH_SECONDS`, one commit for all of them. A call's outcome is
    final only once that commit succeeded: if it fails, every call of the
    round gets the error (nothing of theirs happened).
    """
    first = _take(lane)
    if first is None:
        return []
    # A round's commit hooks run here, outside the calls' contexts.
    events.serving_loop.set(loop)
    if not lane.calls:
        return [_run_call(first, loop, first.queued)]
    connection = db.connection()
    try:
        return _run_round(first, lane, loop, connection)
    except _StaleConnection as exc:
        # As invoke() does: a connection found dead before any actor code
        # ran (after a database restart) is replaced and tried once more.
        logger.info("database connection lost, retrying once: %s", exc.cause)
        connection.close()
    try:
        return _run_round(first, lane, loop, connection)
    except _StaleConnection as exc:
        return [(first, False, database_error(exc.cause) or exc.cause)]


def _run_round(
    first: _Call,
    lane: _Lane,
    loop: asyncio.AbstractEventLoop,
    connection: BaseDatabaseWrapper,
) -> list[_Outcome]:
    taken = [first]
    outcomes: list[_Outcome] = []
    try:
        with db.atomic():
            try:
                _bound_batch_lock_wait(connection, first.queued)
            except DatabaseError as exc:
                if is_connection_failure(exc):
                    raise _StaleConnection(exc) from exc
                raise
            ends = time.monotonic() + BATCH_SECONDS
            call: _Call | None = first
            while call is not None:
                outcome = _run_call(call, loop, call.queued)
                outcomes.append(outcome)
                if connection.needs_rollback:
                    # A failure the savepoint could not contain (the
                    # connection broke): the transaction will roll back.
                    raise _RoundFailed(outcome[2])
                if _is_busy(outcome) or len(taken) >= MAX_BATCH:
                    break
                if time.monotonic() > ends:
                    break
                call = _take(lane)
                if call is not None:
                    taken.append(call)
    except _StaleConnection:
        raise
    except Exception as exc:
        cause = exc.cause if isinstance(exc, _RoundFailed) else exc
        error = database_error(cause) if isinstance(cause, DatabaseError) else None
        failed = error or cause
        return [(call, False, failed) for call in taken]
    return outcomes


class _StaleConnection(Exception):
    """The round's first statement found the connection dead."""

    def __init__(self, cause: DatabaseError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _RoundFailed(Exception):
    """The round's transaction cannot commit; carries the failure."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _is_busy(outcome: _Outcome) -> bool:
    # The row stayed locked by another process past LOCK_TIMEOUT: the calls
    # behind it would wait for the same lock; leave them to the next round.
    return not outcome[1] and isinstance(outcome[2], ActorBusy)


def _bound_batch_lock_wait(connection: BaseDatabaseWrapper, queued: float) -> None:
    """Bound the round's lock waits as the first call's own would be."""
    if not sql.dialect(connection).bounds_lock_waits:
        return
    limit = rivet_settings.LOCK_TIMEOUT
    seconds = action_timeout() - (time.monotonic() - queued)
    if limit is not None:
        seconds = min(float(limit), seconds)
    bound_lock_wait(max(int(seconds * 1000), 1))


def _run_call(call: _Call, loop: asyncio.AbstractEventLoop, started: float) -> _Outcome:
    """Run one call in its caller's context; return its outcome."""

    def run() -> Any:
        # publish() hands the channel-layer message to the caller's loop.
        events.serving_loop.set(loop)
        return invoke_since(call.ref, call.operation, call.origin, started)

    try:
        return (call, True, call.context.run(run))
    except Exception as exc:
        return (call, False, exc)


# -- reads: the read-only actions of an actor loaded in this process ---------------
# Reads of one actor that run at once in this process; beyond, reads wait
# and are served together, MAX_READ_BATCH at most per round. Two: reads
# overlap, and a busy actor's reads share rounds (bench P17: with 45 sockets
# reading, fewer, larger rounds left more of the process to the writers).
READ_SLOTS = 2
MAX_READ_BATCH = 64


@dataclass(slots=True, eq=False)
class _Reads:
    waiting: deque[_Call] = field(default_factory=deque)
    running: int = 0


_reads: dict[tuple[asyncio.AbstractEventLoop, Any], _Reads] = {}


async def _aread(ref: ActorRef, operation: Operation, origin: Origin) -> Any:
    """Run a read-only action of an actor this process has loaded.

    Up to :data:`READ_SLOTS` reads of the actor run at once, each in a
    worker thread, beside its writes; reads arriving while all of them run
    wait, and the next free one serves everything that waited in one round
    (:func:`.reads.round`: one read-only transaction and one read of the
    row for all of them, each still checked, authorized and run on its own
    copy of the state). A busy actor's reads then cost one query per round
    instead of one each.
    """
    loop = asyncio.get_running_loop()
    key = (loop, _lane_key(ref))
    lane = _reads.get(key)
    if lane is None:
        lane = _reads[key] = _Reads()
    call = _Call.waiting(loop, ref, operation, origin)
    lane.waiting.append(call)
    if lane.running < READ_SLOTS:
        lane.running += 1
        loop.create_task(_serve_reads(key, lane))
    return await call.future


async def _serve_reads(
    key: tuple[asyncio.AbstractEventLoop, Any], lane: _Reads
) -> None:
    try:
        while lane.waiting:
            batch: list[_Call] = []
            while lane.waiting and len(batch) < MAX_READ_BATCH:
                call = lane.waiting.popleft()
                if not call.future.cancelled():
                    batch.append(call)
            if not batch:
                continue
            outcomes = await sync_to_async(
                _run_reads, thread_sensitive=False, executor=executor
            )(batch)
            for call, ok, value in outcomes:
                if call.future.done():
                    continue
                if ok:
                    call.future.set_result(value)
                else:
                    call.future.set_exception(value)
    except BaseException as exc:  # pragma: no cover - a bug here must not hang
        for call in lane.waiting:
            if not call.future.done():
                call.future.set_exception(exc)
        lane.waiting.clear()
        raise
    finally:
        lane.running -= 1
        if not lane.running and not lane.waiting:
            _reads.pop(key, None)


def _run_reads(batch: list[_Call]) -> list[_Outcome]:
    """Serve ``batch`` (reads of one actor) in a worker thread."""
    if len(batch) == 1:
        return [_run_read(batch[0])]
    outcomes: list[_Outcome] = []
    alone: list[_Call] = []
    try:
        with reads.round(db.connection()) as shared:
            for call in batch:
                if not shared.serves(call.ref):
                    alone.append(call)
                    continue
                try:
                    value = call.context.run(
                        reads.in_round,
                        shared,
                        invoke_since,
                        call.ref,
                        call.operation,
                        call.origin,
                        call.queued,
                    )
                except Exception as exc:
                    outcomes.append((call, False, exc))
                else:
                    outcomes.append((call, True, value))
    except Exception as exc:
        # The round's transaction failed (its connection broke): what it
        # answered stands; the others run on their own.
        logger.info("read round failed, reading one by one: %s", exc)
        answered = {id(call) for call, _, _ in outcomes}
        alone += [call for call in batch if id(call) not in answered]
    return outcomes + [_run_read(call) for call in alone]


def _run_read(call: _Call) -> _Outcome:
    try:
        value = call.context.run(
            invoke_since, call.ref, call.operation, call.origin, call.queued
        )
    except Exception as exc:
        return (call, False, exc)
    return (call, True, value)
