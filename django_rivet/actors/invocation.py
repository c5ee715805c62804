"""One run of actor code: who calls, what runs, and the :class:`Invocation`.

An :class:`Invocation` holds what a run needs once the actor row is locked:
the row, the checked-out state, ``ctx``, the calling connection, the
broadcasts to log and the effects to run after commit. Operations (an
action, a queue handler, a connection hook...) implement
:class:`Operation`; :func:`django_rivet.actors.spine.invoke` runs them. Every
operation states what ``on_auth`` is asked about it (:class:`AuthRequest`),
or ``None`` to opt out explicitly: the spine, not each entry point, runs the
check.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from asgiref.sync import async_to_sync
from django.db import Error as DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from .. import events
from ..conf import rivet_settings
from ..encoding import cbor_dumps, cbor_loads
from ..exceptions import (
    ActionTimeout,
    ActorBusy,
    ActorReadOnly,
    ActorUnavailable,
    Forbidden,
    RivetError,
    StateTooLarge,
    UserError,
)
from ..models import Actor as ActorRow
from ..models import Connection, db
from . import registry, rows, states, websockets
from .calls import AuthInfo, AuthRequest, Origin
from .context import ActorContext, Conn
from .definition import Actor, HandlerSpec
from .rows import ConnRow, LockedRow
from .websockets import WebSocket

if TYPE_CHECKING:
    from .cache import CachedActor, Measure

__all__ = [
    "Invocation",
    "Operation",
    "active_ids",
    "current_invocation",
]


class Operation(Protocol):
    """What an invocation runs once the actor is locked and loaded."""

    label: str | None

    @property
    def auth(self) -> AuthRequest | None:
        """What ``on_auth`` is asked for external callers (None: no check)."""
        ...

    def prepare(self, definition: type[Actor]) -> None:
        """Check arguments before any I/O; raise a RivetError to refuse."""

    def run(self, invocation: Invocation) -> Any:
        """Run inside the transaction and return the result."""


# Actor ids invoked in the current call chain (re-entrancy guard), and the
# current invocation (so nested async calls join its transaction).
active_ids: contextvars.ContextVar[frozenset[uuid.UUID]] = contextvars.ContextVar(
    "rivet_active_ids", default=frozenset()
)
current: contextvars.ContextVar[Invocation | None] = contextvars.ContextVar(
    "rivet_current_invocation", default=None
)


def current_invocation() -> Invocation | None:
    """Return the invocation running in this context, if any."""
    return current.get()


# -- running user code ------------------------------------------------------------
def run_bounded(
    func: Callable[..., Any], args: tuple[Any, ...], deadline: float
) -> Any:
    """Run a sync or async hook/handler, bounded by ``deadline`` (monotonic)."""
    # Calling a coroutine function returns its coroutine: one check serves
    # both kinds (cheaper than inspecting the function first).
    result = func(*args)
    if inspect.isawaitable(result):
        return _run_async(result, deadline)
    if time.monotonic() > deadline:
        raise ActionTimeout()
    return result


def _run_async(awaitable: Awaitable[Any], deadline: float) -> Any:
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
        cached: CachedActor,
        state: Any,
        state_bytes: bytes,
        origin: Origin,
        started: float,
        created: bool,
        input: Any = None,
        connection: BaseDatabaseWrapper | None = None,
        cursor: CursorWrapper | None = None,
        readonly: bool = False,
    ) -> None:
        self.row = row
        # A read-only action (reads.py): no lock, and every write refused.
        self.readonly = readonly
        # The connection of the transaction the row is locked in, and the
        # cursor that locked it (the state is written on it too), if open.
        self.connection = db.connection() if connection is None else connection
        self.cursor = cursor
        self.actor_id: uuid.UUID = row.id
        self.key: tuple[str, ...] = tuple(row.key_parts)
        self.definition = definition
        self.cached = cached
        self.instance = cached.instance
        self.state = state
        self.state_bytes = state_bytes
        self.origin = origin
        # Both monotonic. A handler with a timeout of its own
        # (@action(timeout=...)) is bounded from the start, like the class's.
        self.started = started
        self.deadline = started + action_timeout(definition)
        self.created = created
        # The state as creation left it (create_state, on_create), so a
        # creating call runs on_state_change only if its work changed that.
        self.created_bytes: bytes | None = None
        self.input = input
        self.broadcasts: list[tuple[str, bytes]] = []
        # The cache's measure of the state as checked out (cache.remeasure).
        self.measure: Measure | None = None
        self.destroy_requested = False
        self.sleep_requested = False
        # Effects to run once the transaction commits (sends, publishes,
        # ctx.after_commit): registered with the transaction when the
        # invocation's work is done, from its own thread -- async handlers
        # add them from an event loop, where the database cannot be asked.
        self._commit_hooks: list[Callable[[], Any]] = []
        # The state_version the loaded state was migrated from (it is
        # written back with the class's, even if its bytes did not change).
        self.migrated_from: int | None = None
        self._conns: dict[uuid.UUID, Conn] = {}
        self._conns_loaded = False
        self.conn: Conn | None = None
        self.ctx = ActorContext(self)

    # -- helpers for operations ----------------------------------------------
    def call(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run a user callable (sync or async) within the time limit."""
        return run_bounded(func, args, self.deadline)

    def call_hook(self, hook: str, *args: Any) -> Any:
        """Run a lifecycle hook if the actor class overrides it."""
        if not self.definition.overrides(hook):
            return None
        return self.call(getattr(self.instance, hook), self.ctx, *args)

    def run_handler(self, spec: HandlerSpec, args: Any) -> Any:
        """Run an action or queue handler with wire arguments."""
        if spec.timeout is not None:
            self.deadline = self.started + spec.timeout
        return self.call(getattr(self.instance, spec.attribute), self.ctx, *args)

    def after_commit(self, func: Callable[..., Any], *args: Any) -> None:
        """Run ``func(*args)`` once the invocation's transaction commits."""
        self._commit_hooks.append(functools.partial(func, *args))

    def savepoint_effects(self) -> tuple[int, int]:
        """Mark the effects recorded so far (see :meth:`drop_effects_since`)."""
        return len(self.broadcasts), len(self._commit_hooks)

    def drop_effects_since(self, mark: tuple[int, int]) -> None:
        """Forget broadcasts and commit effects recorded after ``mark``.

        For a hook whose savepoint rolled back: what it asked for must not
        happen either.
        """
        del self.broadcasts[mark[0] :]
        del self._commit_hooks[mark[1] :]

    def register_commit_hooks(self) -> None:
        """Hand the effects waiting for the commit to the transaction.

        Called in the invoking thread once the invocation's work is done
        (by :meth:`persist` and :meth:`destroy_now`); a rollback drops them.
        """
        hooks, self._commit_hooks = self._commit_hooks, []
        for hook in hooks:
            db.on_commit(hook, robust=True)

    def auth_info(self, request: AuthRequest) -> AuthInfo:
        """Describe the caller and the call for ``on_auth``."""
        origin = self.origin
        return AuthInfo(
            transport=origin.transport,
            user=self.ctx.user,
            headers=origin.headers,
            action=request.action,
            params=origin.params,
            request=origin.request,
            kind=request.kind,
            queue=request.queue,
        )

    def authorize(self, request: AuthRequest) -> None:
        """Run ``on_auth`` for external callers; refuse unless it allows.

        ``None`` or ``True`` allows; ``False`` refuses with
        ``actor/forbidden``, as raising does. A :class:`UserError` keeps its
        code, message and metadata, answered as a refusal (HTTP 403, close
        4403); another :class:`RivetError` keeps its message; any other
        exception refuses with a bare ``actor/forbidden``. Database errors
        and timeouts are not refusals and propagate. Any other return value
        is a bug in the hook, refused as an internal error (never allowed).
        """
        if not self.origin.external or not self.definition.overrides("on_auth"):
            return
        try:
            verdict = self.call_hook("on_auth", self.auth_info(request))
        except (ActionTimeout, ActorBusy, ActorUnavailable, DatabaseError):
            raise
        except UserError as exc:
            raise refusal(exc) from exc
        except Exception as exc:
            message = exc.message if isinstance(exc, RivetError) else "Forbidden"
            raise Forbidden(message) from exc
        if verdict is None or verdict is True:
            return
        if verdict is False:
            raise Forbidden()
        raise TypeError(
            f"{self.definition.__name__}.on_auth returned {verdict!r}; return "
            "None or True to allow the call, False (or raise) to refuse it"
        )

    # -- connections ----------------------------------------------------------
    def _conn_from_row(self, row: Connection | ConnRow) -> Conn:
        state_bytes = bytes(row.state)
        params_bytes = bytes(row.params)
        return Conn(
            self,
            id=row.id,
            channel_name=row.channel_name,
            params=cbor_loads(params_bytes) if params_bytes else None,
            state=cbor_loads(state_bytes) if state_bytes else None,
            state_bytes=state_bytes or cbor_dumps(None),
            subscriptions=list(row.subscriptions),
        )

    def load_conn(self, conn_id: uuid.UUID) -> Conn | None:
        """Load one connection of this actor (``None`` if gone)."""
        if conn_id in self._conns:
            return self._conns[conn_id]
        locked = self.row
        if locked.conn_fetched and conn_id == self.origin.conn_id:
            # The locking statement read it already (or found it gone); used
            # once: later loads (after a disconnect, say) ask the database.
            locked.conn_fetched = False
            if locked.conn is None:
                return None
            conn = self._conns[conn_id] = self._conn_from_row(locked.conn)
            return conn
        row = rows.fetch_conn(conn_id, self.actor_id, self.connection)
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

    def load_websockets(self) -> list[WebSocket]:
        """Return handles of every raw WebSocket of this actor."""
        found = Connection.objects.filter(
            actor_id=self.actor_id, encoding=websockets.ENCODING
        ).values_list("id", "channel_name")
        return [WebSocket(conn_id, channel, running=self) for conn_id, channel in found]

    def add_conn(self, conn: Conn) -> None:
        """Track a connection created during this invocation."""
        self._conns[conn.id] = conn

    def remove_conn(self, conn_id: uuid.UUID) -> Conn | None:
        """Stop tracking a connection deleted during this invocation."""
        return self._conns.pop(conn_id, None)

    # -- persistence -------------------------------------------------------------
    def persist(self) -> None:
        """Write what changed, in the invocation's transaction.

        A changed state (or connection state) encoded larger than
        ``MAX_STATE_BYTES`` is refused with ``actor/state_too_large``
        before anything is written; the caller's transaction rolls back.
        """
        # An unchanged state costs one encoding (in C), no walk: see
        # states.encode and encoding.encode_if_changed.
        definition = self.definition
        new_bytes, self.state = states.encode(definition, self.state, self.state_bytes)
        state: bytes | None = None
        changed = new_bytes != self.state_bytes
        if changed or self.migrated_from is not None:
            if (
                changed
                and definition.overrides("on_state_change")
                and (not self.created or new_bytes != self.created_bytes)
            ):
                self.call_hook("on_state_change", self.state)
                new_bytes, self.state = states.encode(definition, self.state)
            check_state_size(new_bytes, "actor")
            state = new_bytes
        for conn in self._conns.values():
            data = conn.changed_state()
            if data is not None:
                check_state_size(data, "connection")
                Connection.objects.filter(pk=conn.id).update(state=data)
                conn.state_saved(data)
        event_seq: int | None = None
        log: list[tuple[str, list[Any]]] = []
        if self.broadcasts:
            logged, log = events.log_statements(
                self.actor_id, self.row.event_seq, self.broadcasts
            )
            event_seq = self.row.event_seq = logged[-1].seq
            self.after_commit(events.publish, self.actor_id, logged)
        if state is not None or event_seq is not None:
            # The event log's writes ride along (one statement on PostgreSQL).
            rows.update_row(
                self.actor_id,
                state,
                event_seq,
                before=log,
                connection=self.connection,
                cursor=self.cursor,
                state_version=definition.state_version,
            )
            if state is not None:
                self.row.version += 1
                self.row.state_version = definition.state_version
        self.state_bytes = new_bytes
        self.register_commit_hooks()

    def refuse_changes(self) -> None:
        """Refuse a read-only call that changed ``ctx.state`` or a ``conn.state``.

        Assignments are refused as they happen; changes made in place are
        found here, by encoding. Nothing is written either way.
        """
        if _changed(self.state, self.state_bytes):
            raise ActorReadOnly.refusing("change ctx.state")
        for conn in self._conns.values():
            if _changed(conn.state, conn.saved_state()):
                raise ActorReadOnly.refusing("change conn.state")

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
        self.register_commit_hooks()

    def timed_out(self) -> bool:
        """Tell whether the invocation ran past its deadline."""
        return time.monotonic() > self.deadline


def _changed(value: Any, stored: bytes) -> bool:
    try:
        if cbor_dumps(value, "state") == stored:
            return False
    except (TypeError, ValueError):
        return True
    if not stored:
        return value is not None
    # Bytes an older encoder wrote may differ for an equal value.
    return bool(cbor_loads(stored) != value)


def refusal(error: UserError) -> UserError:
    """Return ``error`` as ``on_auth``'s refusal: its code, answered with 403."""
    refused = UserError(error.message, code=error.code, metadata=error.metadata)
    refused.http_status = 403
    return refused


def check_state_size(data: bytes, what: str) -> None:
    """Refuse an encoded state over ``MAX_STATE_BYTES`` (``actor/state_too_large``)."""
    limit = rivet_settings.MAX_STATE_BYTES
    if len(data) > limit:
        raise StateTooLarge(
            f"The {what} state is {len(data)} bytes encoded; the limit is {limit}",
            metadata={"size": len(data), "limit": limit},
        )


def action_timeout(definition: type[Actor] | None = None) -> float:
    """Return the seconds an invocation may run.

    The actor class's ``action_timeout`` if set, else ``ACTION_TIMEOUT``; an
    action's own ``@action(timeout=...)`` applies once it runs
    (:meth:`Invocation.run_handler`).
    """
    if definition is not None and definition.action_timeout is not None:
        return float(definition.action_timeout)
    return rivet_settings.ACTION_TIMEOUT


def longest_action_timeout() -> float:
    """Return the longest time any registered actor's invocation may run.

    ``ACTION_TIMEOUT`` or a longer per-class or per-action timeout; claims
    of scheduled work must outlive it.
    """
    longest = rivet_settings.ACTION_TIMEOUT
    for definition in registry.all_actors().values():
        longest = max(longest, action_timeout(definition))
        for spec in (*definition.actions.values(), *definition.queue_handlers.values()):
            if spec.timeout is not None:
                longest = max(longest, float(spec.timeout))
    return longest
