"""The one invocation path: every entry point runs actor code through invoke().

``invoke(ref, operation, origin)``:

1. resolves the definition and lets the operation check its arguments
   (``request/invalid_args``, ``actor/action_not_found``) before any I/O;
2. opens a transaction and locks the actor row -- ``SELECT ... FOR UPDATE`` on
   PostgreSQL; on SQLite the first statement is a write, which takes the
   database write lock, so two processes never read the same version;
3. loads the state (reusing this process's decoded copy when the row version
   matches), builds ``ctx``, runs lifecycle hooks and ``on_auth``;
4. runs the operation (an action, a queue handler, a connection hook...);
5. persists state (only if its CBOR encoding changed), connection states and
   the event log, in the same transaction as the handler's KV and ORM writes;
6. commits, then delivers broadcasts and sends (``transaction.on_commit``).

Any exception rolls everything back and propagates unchanged; transports map
it to the wire with :func:`public_error`.

Async handlers run with ``async_to_sync`` inside the invoking thread; their
ORM calls (the async ORM, thread-sensitive ``sync_to_async``) hop back into
that thread, so they share its connection and transaction. Async callers run
``invoke`` in a worker thread of :data:`executor`, never in the single
thread-sensitive thread, so one actor awaiting I/O does not stall the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from asgiref.sync import async_to_sync, sync_to_async
from django.db import transaction

from .. import clock, events
from ..conf import rivet_settings
from ..encoding import cbor_dumps, cbor_loads
from ..exceptions import (
    ActionNotFound,
    ActionTimeout,
    ActorNotFound,
    Forbidden,
    InternalError,
    ReentrantCall,
    RivetError,
)
from ..models import Actor as ActorRow
from ..models import ActorEvent, Connection
from . import registry, rows
from .context import ActorContext, Conn
from .definition import Actor, HandlerSpec
from .rows import ActorRef, LockedRow

logger = logging.getLogger("django_rivet.actors")

__all__ = [
    "ActorRef",
    "AuthInfo",
    "CallAction",
    "EnsureActor",
    "Invocation",
    "Operation",
    "Origin",
    "ainvoke",
    "clear_cache",
    "evict_idle",
    "invoke",
    "public_error",
]

INVOKE_THREADS = 16

# Threads for invocations started from async code (see module docstring).
executor = ThreadPoolExecutor(
    max_workers=INVOKE_THREADS, thread_name_prefix="rivet-invoke"
)


@dataclass(frozen=True, slots=True)
class Origin:
    """Who is calling; decides ``ctx.conn``, ``ctx.user``, ``ctx.fire_info``."""

    transport: str = "internal"  # http|websocket|schedule|cron|queue|internal
    user: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    request: Any = None
    params: Any = None
    conn_id: uuid.UUID | None = None
    fire_info: dict[str, Any] | None = None

    @property
    def external(self) -> bool:
        """Tell whether ``on_auth`` guards this call."""
        return self.transport in ("http", "websocket")


INTERNAL = Origin()


@dataclass(frozen=True, slots=True)
class AuthInfo:
    """What ``on_auth`` is told about the caller."""

    transport: str
    user: Any
    headers: Mapping[str, str]
    action: str | None
    params: Any
    request: Any


class Operation(Protocol):
    """What an invocation runs once the actor is locked and loaded."""

    label: str | None

    def prepare(self, definition: type[Actor]) -> None:
        """Check arguments before any I/O; raise a RivetError to refuse."""

    def run(self, invocation: Invocation) -> Any:
        """Run inside the transaction and return the result."""


# -- the process cache ------------------------------------------------------------
@dataclass(slots=True)
class _Cached:
    instance: Actor
    definition: type[Actor]
    # The decoded state matching ``version``; None while an invocation has it
    # checked out, so a rolled-back mutation is never reused.
    state: Any = None
    state_bytes: bytes | None = None
    version: int = -1
    last_used: float = 0.0


_cache: dict[uuid.UUID, _Cached] = {}
_cache_lock = threading.Lock()
_last_idle_check = 0.0

# Actor ids invoked in the current call chain (re-entrancy guard), and the
# current invocation (so nested async calls join its transaction).
_active_ids: contextvars.ContextVar[frozenset[uuid.UUID]] = contextvars.ContextVar(
    "rivet_active_ids", default=frozenset()
)
_current: contextvars.ContextVar[Invocation | None] = contextvars.ContextVar(
    "rivet_current_invocation", default=None
)


def clear_cache() -> None:
    """Forget every cached instance without running hooks (tests)."""
    with _cache_lock:
        _cache.clear()


def cached_ids() -> set[uuid.UUID]:
    """Return the ids of actors loaded in this process."""
    with _cache_lock:
        return set(_cache)


def current_invocation() -> Invocation | None:
    """Return the invocation running in this context, if any."""
    return _current.get()


# -- running user code ------------------------------------------------------------
def _run_callable(
    func: Callable[..., Any], args: tuple[Any, ...], deadline: float
) -> Any:
    """Run a sync or async hook/handler, bounded by ``deadline`` (monotonic)."""
    if inspect.iscoroutinefunction(func):
        return _run_async(func(*args), deadline)
    result = func(*args)
    if inspect.isawaitable(result):
        return _run_async(result, deadline)
    if time.monotonic() > deadline:
        raise ActionTimeout()
    return result


def _run_async(awaitable: Any, deadline: float) -> Any:
    async def bounded() -> Any:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ActionTimeout()
        try:
            return await asyncio.wait_for(awaitable, remaining)
        except TimeoutError:
            raise ActionTimeout() from None

    return async_to_sync(bounded)()


# -- the invocation ---------------------------------------------------------------
class Invocation:
    """One run of actor code: the locked row, state, ctx and pending effects."""

    def __init__(
        self,
        row: LockedRow,
        definition: type[Actor],
        cached: _Cached,
        state: Any,
        state_bytes: bytes,
        origin: Origin,
        deadline: float,
        created: bool,
        input: Any = None,
    ) -> None:
        self.row = row
        self.actor_id: uuid.UUID = row.id
        self.key: tuple[str, ...] = tuple(row.key_parts)
        self.definition = definition
        self.cached = cached
        self.instance = cached.instance
        self.state = state
        self.state_bytes = state_bytes
        self.origin = origin
        self.deadline = deadline
        self.created = created
        self.input = input
        self.broadcasts: list[tuple[str, bytes]] = []
        self.destroy_requested = False
        self.sleep_requested = False
        self._conns: dict[uuid.UUID, Conn] = {}
        self._conns_loaded = False
        self.conn: Conn | None = None
        self.ctx = ActorContext(self)

    # -- helpers for operations ----------------------------------------------
    def call(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run a user callable (sync or async) within the time limit."""
        return _run_callable(func, args, self.deadline)

    def call_hook(self, hook: str, *args: Any) -> Any:
        """Run a lifecycle hook if the actor class overrides it."""
        if not self.definition.overrides(hook):
            return None
        return self.call(getattr(self.instance, hook), self.ctx, *args)

    def run_handler(self, spec: HandlerSpec, args: Any) -> Any:
        """Run an action or queue handler with wire arguments."""
        return self.call(getattr(self.instance, spec.attribute), self.ctx, *args)

    def after_commit(self, func: Callable[..., Any], *args: Any) -> None:
        """Run ``func(*args)`` once the invocation's transaction commits."""
        transaction.on_commit(lambda: func(*args), robust=True)

    def auth_info(self, action: str | None) -> AuthInfo:
        """Describe the caller for ``on_auth``."""
        origin = self.origin
        return AuthInfo(
            transport=origin.transport,
            user=self.ctx.user,
            headers=origin.headers,
            action=action,
            params=origin.params,
            request=origin.request,
        )

    def authorize(self, action: str | None) -> None:
        """Run ``on_auth`` for external callers; any exception refuses."""
        if not self.origin.external or not self.definition.overrides("on_auth"):
            return
        try:
            self.call_hook("on_auth", self.auth_info(action))
        except ActionTimeout:
            raise
        except Exception as exc:
            message = exc.message if isinstance(exc, RivetError) else "Forbidden"
            raise Forbidden(message) from exc

    # -- connections ----------------------------------------------------------
    def _conn_from_row(self, row: Connection) -> Conn:
        state_bytes = bytes(row.state)
        params_bytes = bytes(row.params)
        return Conn(
            self,
            id=row.id,
            channel_name=row.channel_name,
            params=cbor_loads(params_bytes) if params_bytes else None,
            state=cbor_loads(state_bytes, max_depth=400) if state_bytes else None,
            state_bytes=state_bytes or cbor_dumps(None),
            subscriptions=list(row.subscriptions),
        )

    def load_conn(self, conn_id: uuid.UUID) -> Conn | None:
        """Load one connection of this actor (``None`` if gone)."""
        if conn_id in self._conns:
            return self._conns[conn_id]
        row = Connection.objects.filter(pk=conn_id, actor_id=self.actor_id).first()
        if row is None:
            return None
        conn = self._conns[conn_id] = self._conn_from_row(row)
        return conn

    def load_conns(self) -> list[Conn]:
        """Load every live connection of this actor."""
        if not self._conns_loaded:
            for row in Connection.objects.filter(actor_id=self.actor_id):
                if row.id not in self._conns:
                    self._conns[row.id] = self._conn_from_row(row)
            self._conns_loaded = True
        return list(self._conns.values())

    def add_conn(self, conn: Conn) -> None:
        """Track a connection created during this invocation."""
        self._conns[conn.id] = conn

    def remove_conn(self, conn_id: uuid.UUID) -> Conn | None:
        """Stop tracking a connection deleted during this invocation."""
        return self._conns.pop(conn_id, None)

    # -- persistence -------------------------------------------------------------
    def persist(self) -> None:
        """Write what changed, in the invocation's transaction."""
        new_bytes = cbor_dumps(self.state)
        changes: dict[str, Any] = {}
        if new_bytes != self.state_bytes:
            if not self.created and self.definition.overrides("on_state_change"):
                self.call_hook("on_state_change", self.state)
                new_bytes = cbor_dumps(self.state)
            changes["state"] = new_bytes
        for conn in self._conns.values():
            data = conn._changed_state()
            if data is not None:
                Connection.objects.filter(pk=conn.id).update(state=data)
                conn._state_bytes = data
        if self.broadcasts:
            changes["event_seq"] = self._write_events()
        if changes:
            rows.update_row(
                self.actor_id, changes.get("state"), changes.get("event_seq")
            )
            if "state" in changes:
                self.row.version += 1
        self.state_bytes = new_bytes

    def _write_events(self) -> int:
        first = self.row.event_seq + 1
        now = clock.now_datetime()
        rows = [
            ActorEvent(
                actor_id=self.actor_id,
                seq=first + i,
                name=name,
                args=args,
                created_at=now,
            )
            for i, (name, args) in enumerate(self.broadcasts)
        ]
        ActorEvent.objects.bulk_create(rows)
        last = first + len(rows) - 1
        self.row.event_seq = last
        keep = max(int(rivet_settings.EVENT_LOG_SIZE), 0)
        if last > keep:
            ActorEvent.objects.filter(
                actor_id=self.actor_id, seq__lte=last - keep
            ).delete()
        messages = [
            {"seq": row.seq, "name": row.name, "args": row.args} for row in rows
        ]
        self.after_commit(events.publish, self.actor_id, messages)
        return last

    def destroy_now(self) -> None:
        """Run ``on_destroy`` and delete the actor and all it owns."""
        self.call_hook("on_destroy")
        channels = list(
            Connection.objects.filter(actor_id=self.actor_id).values_list(
                "channel_name", flat=True
            )
        )
        ActorRow.objects.filter(pk=self.actor_id).delete()
        message = {"type": events.DISCONNECT_MESSAGE, "reason": "destroyed"}
        for channel in channels:
            self.after_commit(events.send_to_channel, channel, message)


# -- built-in operations ------------------------------------------------------------
@dataclass(slots=True)
class CallAction:
    """Run an action with wire arguments."""

    action: str
    args: Any = ()
    label: str | None = None
    spec: HandlerSpec | None = None

    def prepare(self, definition: type[Actor]) -> None:
        """Find the action and check the arguments against its signature."""
        spec = definition.actions.get(self.action)
        if spec is None:
            raise ActionNotFound(
                f"Actor {definition.name!r} has no action {self.action!r}",
                metadata={"action": self.action},
            )
        spec.check_args(self.args)
        self.spec = spec
        self.label = f"action {self.action}"

    def run(self, invocation: Invocation) -> Any:
        """Authorize, then run the action."""
        invocation.authorize(self.action)
        assert self.spec is not None
        return invocation.run_handler(self.spec, self.args)


@dataclass(slots=True)
class EnsureActor:
    """Create or load an actor without running an action."""

    label: str | None = "ensure"

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check."""

    def run(self, invocation: Invocation) -> tuple[uuid.UUID, bool]:
        """Authorize external callers; return ``(actor_id, created)``."""
        invocation.authorize(None)
        return invocation.actor_id, invocation.created


@dataclass(slots=True)
class RunHook:
    """Run one lifecycle hook (destroy, sleep)."""

    hook: Literal["destroy", "sleep"]
    label: str | None = None

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check."""

    def run(self, invocation: Invocation) -> None:
        """Request the hook's effect; invoke() carries it out."""
        if self.hook == "destroy":
            invocation.destroy_requested = True
        else:
            invocation.sleep_requested = True


# -- invoke ---------------------------------------------------------------------------
def _checkout(
    row: LockedRow, definition: type[Actor]
) -> tuple[_Cached, bool, Any, bytes | None]:
    """Take this process's cached instance/state for ``row``."""
    with _cache_lock:
        cached = _cache.get(row.id)
        if cached is None or cached.definition is not definition:
            cached = _cache[row.id] = _Cached(
                instance=definition(), definition=definition
            )
            fresh = True
        else:
            fresh = False
        state, state_bytes = None, None
        if cached.state_bytes is not None and cached.version == row.version:
            state, state_bytes = cached.state, cached.state_bytes
        cached.state = cached.state_bytes = None
        cached.version = -1
        cached.last_used = clock.now()
    return cached, fresh, state, state_bytes


def _resolve_definition(ref: ActorRef) -> type[Actor]:
    if ref.name is not None:
        return registry.get(ref.name)
    assert ref.actor_id is not None
    # An actor loaded in this process needs no lookup; invoke() checks the
    # locked row's name anyway, in case the id now belongs to another class.
    with _cache_lock:
        cached = _cache.get(ref.actor_id)
    if cached is not None:
        # The registry, not the cache, says which class serves the name now.
        return registry.get(cached.definition.name)
    name = (
        ActorRow.objects.filter(pk=ref.actor_id).values_list("name", flat=True).first()
    )
    if name is None:
        raise ActorNotFound("Actor not found", metadata={"actor_id": str(ref.actor_id)})
    return registry.get(name)


def invoke(ref: ActorRef, operation: Operation, origin: Origin = INTERNAL) -> Any:
    """Run ``operation`` on the actor ``ref`` atomically, one at a time."""
    definition = _resolve_definition(ref)
    operation.prepare(definition)
    deadline = time.monotonic() + float(rivet_settings.ACTION_TIMEOUT)
    active = _active_ids.get()
    checked_out: tuple[uuid.UUID, _Cached, bool] | None = None
    try:
        with transaction.atomic():
            row, created = rows.lock_row(ref)
            if row.id in active:
                raise ReentrantCall()
            if row.name != definition.name:
                definition = registry.get(row.name)
            cached, fresh, state, state_bytes = _checkout(row, definition)
            checked_out = (row.id, cached, fresh)
            if state_bytes is None and not created:
                state_bytes = bytes(row.state)
                state = cbor_loads(state_bytes, max_depth=400) if state_bytes else None
            invocation = Invocation(
                row,
                definition,
                cached,
                state,
                state_bytes or b"",
                origin,
                deadline,
                created,
                ref.input,
            )
            active_token = _active_ids.set(active | {row.id})
            current_token = _current.set(invocation)
            try:
                result = _run(invocation, operation, fresh)
            finally:
                _current.reset(current_token)
                _active_ids.reset(active_token)
    except BaseException:
        # The checked-out state stays out of the cache (it may hold mutations
        # of the rolled-back transaction); a fresh instance is dropped so the
        # next load runs on_wake again.
        if checked_out is not None and checked_out[2]:
            with _cache_lock:
                if _cache.get(checked_out[0]) is checked_out[1]:
                    del _cache[checked_out[0]]
        raise
    _after(invocation)
    return result


def _run(invocation: Invocation, operation: Operation, fresh: bool) -> Any:
    if invocation.created:
        invocation.state = invocation.call(
            invocation.instance.create_state, invocation.ctx, invocation.input
        )
        invocation.call_hook("on_create", invocation.input)
    if fresh:
        invocation.call_hook("on_wake")
    if invocation.origin.conn_id is not None and invocation.conn is None:
        invocation.conn = invocation.load_conn(invocation.origin.conn_id)
    result = operation.run(invocation)
    if invocation.destroy_requested:
        invocation.destroy_now()
        return result
    if invocation.sleep_requested:
        invocation.call_hook("on_sleep")
    invocation.persist()
    if time.monotonic() > invocation.deadline:
        raise ActionTimeout()
    return result


def _after(invocation: Invocation | None) -> None:
    """Update the process cache once the transaction is over."""
    if invocation is None:
        return
    cached = invocation.cached
    with _cache_lock:
        if invocation.destroy_requested or invocation.sleep_requested:
            if _cache.get(invocation.actor_id) is cached:
                del _cache[invocation.actor_id]
            return
        if transaction.get_connection().in_atomic_block:
            # Nested in the caller's transaction: it may still roll back, so
            # the state is not known to be committed; don't cache it.
            return
        cached.state = invocation.state
        cached.state_bytes = invocation.state_bytes
        cached.version = invocation.row.version
        cached.last_used = clock.now()
    _maybe_evict_idle()


def _maybe_evict_idle() -> None:
    global _last_idle_check
    now = clock.now()
    if now - _last_idle_check < 1.0:
        return
    _last_idle_check = now
    if (
        current_invocation() is None
        and not transaction.get_connection().in_atomic_block
    ):
        evict_idle()


def evict_idle(max_idle: float | None = None) -> int:
    """Evict actors idle longer than ``SLEEP_TIMEOUT``; run their ``on_sleep``.

    Returns how many were evicted. Best effort: a failing ``on_sleep`` is
    logged and the actor is evicted anyway.
    """
    limit = float(rivet_settings.SLEEP_TIMEOUT if max_idle is None else max_idle)
    now = clock.now()
    with _cache_lock:
        idle = [
            (actor_id, entry)
            for actor_id, entry in _cache.items()
            if now - entry.last_used >= limit
        ]
    evicted = 0
    for actor_id, entry in idle:
        if entry.definition.overrides("on_sleep"):
            try:
                invoke(ActorRef.by_id(actor_id), RunHook("sleep"))
            except ActorNotFound:
                pass
            except Exception:
                logger.exception("on_sleep failed actor_id=%s", actor_id)
        with _cache_lock:
            if _cache.get(actor_id) is entry:
                del _cache[actor_id]
        evicted += 1
    return evicted


async def ainvoke(
    ref: ActorRef, operation: Operation, origin: Origin = INTERNAL
) -> Any:
    """Async :func:`invoke`: runs in a worker thread of its own.

    Inside an invocation (an async handler calling another actor) it runs in
    the invoking thread instead, so the call joins that transaction.
    """
    if current_invocation() is not None:
        return await sync_to_async(invoke, thread_sensitive=True)(
            ref, operation, origin
        )
    return await sync_to_async(invoke, thread_sensitive=False, executor=executor)(
        ref, operation, origin
    )


def close_worker_connections() -> None:
    """Close the database connections of every invocation worker thread.

    Worker threads keep their connection between invocations (reconnecting
    each time would cost more than the invocation). Call this before
    dropping a database, e.g. at the end of a test session.
    """
    from django.db import connections

    size = executor._max_workers
    # Every job waits for all the others, so each runs in a thread of its own.
    barrier = threading.Barrier(size, timeout=10)

    def close() -> None:
        connections.close_all()
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()

    for future in [executor.submit(close) for _ in range(size)]:
        future.result()


def public_error(exc: BaseException) -> RivetError:
    """Map any exception to what the wire may show; log internal ones."""
    if isinstance(exc, RivetError):
        return exc
    logger.error("internal error in actor code", exc_info=exc)
    if rivet_settings.EXPOSE_ERRORS:
        return InternalError(f"{type(exc).__name__}: {exc}")
    return InternalError()
