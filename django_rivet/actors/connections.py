"""The ``Connection`` row's life: admission, subscriptions, goodbye, the sweep.

A connection is a ``Connection`` row written in the same invocation that runs
``on_before_connect``, ``create_conn_state`` and ``on_connect`` (the
:class:`Connect` operation), so ``ctx.conns`` of any process sees it. It is
removed by :class:`Disconnect`, which runs ``on_disconnect`` under the actor's
one-at-a-time rule; the transport runs it when a socket ends, whatever ended
it (``django_rivet.transport.heartbeat.disconnect_cleanup``).

A process that crashes (``kill -9``, OOM, power loss) cannot run
``Disconnect`` for its sockets: :mod:`django_rivet.actors.liveness` keeps
the rows of live processes fresh and sweeps the others.

Every operation here runs inside an invocation (the spine), so the one-at-a-
time rule and atomicity hold for them as for actions; the transport only
decodes, calls and encodes.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import clock, events
from ..conf import rivet_settings
from ..encoding import cbor_dumps, cbor_loads
from ..exceptions import (
    ActionNotFound,
    ActionTimeout,
    ConnectionExpired,
    EventLogTruncated,
    Forbidden,
    RivetError,
    TooManyConnections,
)
from ..models import Connection, db
from .calls import AuthRequest
from .context import Conn
from .definition import Actor
from .operations import CallAction, OutputEncoder
from .websockets import WebSocket

if TYPE_CHECKING:
    from .invocation import Invocation

logger = logging.getLogger("django_rivet.actors")

__all__ = [
    "SERVER_ID",
    "ConnAction",
    "Connect",
    "ConnectResult",
    "Disconnect",
    "FollowEvents",
    "Subscribe",
    "WebSocketMessage",
    "admitted",
    "refused_subscriptions",
    "save_subscriptions",
]

# Identifies this process in Connection.server_id: unique per process start,
# so a restarted process never refreshes its predecessor's rows.
SERVER_ID = f"{socket.gethostname()[:80]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"

# The subscription to every event. A class that defines ``can_subscribe``
# decides per name, so it cannot be subscribed to with the wildcard (see
# refused_subscriptions).
WILDCARD = "*"


# The connection id of a follower (FollowEvents), which has no connection.
FOLLOWER = uuid.UUID(int=0)


# -- operations (run by invoke, inside the actor's transaction) --------------------
@dataclass(frozen=True, slots=True)
class ConnectResult:
    """What the transport learns from a successful :class:`Connect`."""

    actor_id: uuid.UUID
    conn_id: uuid.UUID
    # Last event seq committed before the connection existed.
    head: int
    # For ``since``: the oldest seq still in the log (None: log empty) and
    # whether events after ``since`` were already dropped from it.
    oldest: int | None = None
    truncated: bool = False
    # Subscriptions of the connect request that ``can_subscribe`` refused.
    refused: dict[str, RivetError] = field(default_factory=dict)
    # The actor's registry name (later calls address it by id and name).
    name: str = ""

    def notices(self, since: int | None) -> list[RivetError]:
        """What the new connection is told first, after its init.

        The subscriptions ``can_subscribe`` refused, then, when the log no
        longer reaches back to ``since``, ``actor/event_log_truncated``.
        """
        notices = list(self.refused.values())
        if self.truncated:
            notices.append(
                EventLogTruncated(
                    "The event log no longer reaches back to the requested seq; "
                    "refetch the state",
                    metadata={
                        "since": since,
                        "oldest": self.oldest,
                        "latest": self.head,
                    },
                )
            )
        return notices


def refused_subscriptions(
    invocation: Invocation, names: list[str]
) -> dict[str, RivetError]:
    """Ask ``can_subscribe`` about each event; return the refusals by name.

    ``False`` or any exception refuses with ``actor/forbidden`` (a
    :class:`~django_rivet.RivetError`'s message is kept). Each call runs in a
    savepoint, so a failing hook's writes roll back alone.

    The wildcard ``*`` is refused outright where the class defines
    ``can_subscribe``: the hook decides per event name, and asking it for
    each new name on the delivery path would put an invocation (under the
    actor's one-at-a-time rule) in front of every connection's first event
    of that name. Such a class's clients subscribe by name.
    """
    refused: dict[str, RivetError] = {}
    if not invocation.definition.overrides("can_subscribe"):
        return refused
    for name in names:
        if name == WILDCARD:
            refused[name] = Forbidden(
                "This actor decides subscriptions per event name "
                "(can_subscribe): subscribe by name, not with '*'",
                metadata={"event": name},
            )
            continue
        effects = invocation.savepoint_effects()
        try:
            with db.atomic():
                allowed = invocation.call_hook("can_subscribe", name)
        except ActionTimeout:
            raise
        except Exception as exc:
            invocation.drop_effects_since(effects)
            message = exc.message if isinstance(exc, RivetError) else "Forbidden"
            refused[name] = Forbidden(message, metadata={"event": name})
            continue
        if allowed is False:
            refused[name] = Forbidden(
                f"Subscribing to {name!r} is not allowed", metadata={"event": name}
            )
    return refused


def admitted(
    invocation: Invocation,
    conn_id: uuid.UUID,
    since: int | None,
    refused: dict[str, RivetError],
) -> ConnectResult:
    """Say where the actor's event log stands for a connection just admitted."""
    head = int(invocation.row.event_seq)
    oldest, truncated = None, False
    if since is not None:
        oldest, truncated = events.window(invocation.actor_id, since, head)
    return ConnectResult(
        invocation.actor_id,
        conn_id,
        head,
        oldest,
        truncated,
        refused,
        invocation.definition.name,
    )


def save_subscriptions(conn_id: uuid.UUID, names: list[str]) -> None:
    """Store a connection's subscriptions (``*`` for every event) on its row."""
    Connection.objects.filter(pk=conn_id).update(subscriptions=names)


def _check_connection_limit(invocation: Invocation) -> None:
    """Refuse a connection beyond ``MAX_CONNECTIONS_PER_ACTOR`` (close 4429).

    Counted under the actor's lock, so concurrent handshakes cannot overshoot;
    rows of a crashed process count until the sweeper removes them.
    """
    limit = rivet_settings.MAX_CONNECTIONS_PER_ACTOR
    if limit is None:
        return
    count = Connection.objects.filter(actor_id=invocation.actor_id).count()
    if count >= limit:
        raise TooManyConnections(
            f"The actor has {count} connections; the limit is {limit}",
            metadata={"limit": limit},
        )


@dataclass(slots=True)
class Connect:
    """Admit a connection: auth, hooks, the ``Connection`` row, ``on_connect``."""

    params: Any
    channel_name: str
    encoding: str = "json"
    subscriptions: list[str] = field(default_factory=list)
    since: int | None = None
    server_id: str = SERVER_ID
    label: str | None = "connect"
    # Set when on_before_connect refused (close code 4403).
    refused: bool = False
    # A raw WebSocket (websockets.py): on_websocket runs after on_connect.
    websocket: WebSocket | None = None
    auth = AuthRequest("connect")

    def prepare(self, definition: type[Actor]) -> None:
        """Refuse a raw WebSocket to a class without ``on_websocket``."""
        if self.websocket is not None and not definition.overrides("on_websocket"):
            raise ActionNotFound(
                "This actor does not take raw WebSockets (no on_websocket)"
            )

    def run(self, invocation: Invocation) -> ConnectResult:
        """Admit the connection, or raise to refuse it (nothing persists)."""
        _check_connection_limit(invocation)
        try:
            invocation.call_hook("on_before_connect", self.params)
        except RivetError:
            self.refused = True
            raise
        except Exception as exc:
            self.refused = True
            raise Forbidden("Connection refused") from exc
        state = invocation.call_hook("create_conn_state", self.params)
        state_bytes = cbor_dumps(state, "conn.state")
        conn = Conn(
            invocation,
            id=uuid.uuid4(),
            channel_name=self.channel_name,
            params=self.params,
            state=state,
            state_bytes=state_bytes,
            subscriptions=list(self.subscriptions),
        )
        # can_subscribe sees the connection (ctx.conn) before its row exists.
        invocation.conn = conn
        refused = refused_subscriptions(invocation, self.subscriptions)
        conn.subscriptions = [n for n in self.subscriptions if n not in refused]
        now = clock.now_datetime()
        row = Connection.objects.create(
            id=conn.id,
            actor_id=invocation.actor_id,
            channel_name=self.channel_name,
            server_id=self.server_id,
            params=cbor_dumps(self.params, "params"),
            state=state_bytes,
            subscriptions=list(conn.subscriptions),
            encoding=self.encoding,
            created_at=now,
            last_seen_at=now,
        )
        invocation.add_conn(conn)
        invocation.call_hook("on_connect", conn)
        if self.websocket is not None:
            self.websocket.id = conn.id
            with self.websocket.running_in(invocation):
                invocation.call_hook("on_websocket", self.websocket)
        # Events on_connect broadcasts get seqs above head: they arrive live.
        return admitted(invocation, row.id, self.since, refused)


@dataclass(slots=True)
class FollowEvents:
    """Admit a follower of the actor's events (Server-Sent Events).

    ``on_auth`` (``info.kind == "connect"``) and ``can_subscribe`` (no
    ``ctx.conn``) decide, as for a connection; no row, hooks or state.
    """

    subscriptions: list[str] = field(default_factory=list)
    since: int | None = None
    label: str | None = "follow"
    auth = AuthRequest("connect")

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check before I/O: the transport validated the names."""

    def run(self, invocation: Invocation) -> ConnectResult:
        """Return where the event log stands and which names were refused."""
        refused = refused_subscriptions(invocation, self.subscriptions)
        return admitted(invocation, FOLLOWER, self.since, refused)


@dataclass(slots=True)
class Subscribe:
    """Ask ``can_subscribe`` whether the calling connection may get ``event``.

    Returns the refusal (``None``: allowed). ``on_auth`` is not asked again:
    it admitted the connection; ``can_subscribe`` decides per event.
    """

    event: str
    label: str | None = "subscribe"
    auth = None

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check: the consumer validated the name."""

    def run(self, invocation: Invocation) -> RivetError | None:
        """Run the hook for the calling connection."""
        if invocation.conn is None:
            raise ConnectionExpired()
        return refused_subscriptions(invocation, [self.event]).get(self.event)


@dataclass(slots=True)
class ConnAction:
    """Run an action for a connection (``ctx.conn`` set).

    ``on_auth`` runs for each action, with ``info.action`` set, as it does
    over HTTP: a connection admitted to the actor is not thereby allowed
    every action (connection-level checks belong in ``on_before_connect``).
    """

    action: str
    args: Any = ()
    label: str | None = None
    # The connection's encoder for the output (see CallAction.encoder).
    encoder: OutputEncoder | None = None
    _call: CallAction | None = None

    @property
    def auth(self) -> AuthRequest:
        """Ask ``on_auth`` about this action."""
        return AuthRequest("action", action=self.action)

    @property
    def readonly(self) -> bool:
        """Whether the action is read-only (known once prepared)."""
        return self._call is not None and self._call.readonly

    def prepare(self, definition: type[Actor]) -> None:
        """Find the action and check the arguments, before any I/O."""
        self._call = CallAction(
            self.action, self.args, encoder=self.encoder, args_checked=True
        )
        self._call.prepare(definition)
        self.label = self._call.label

    def run(self, invocation: Invocation) -> Any:
        """Run the action; refuse if the connection row is gone.

        A read-only action reads the row only if it asks for ``ctx.conn``
        (a read on an expired connection harms nothing; its next write
        finds it expired).
        """
        assert self._call is not None
        if not self.readonly and invocation.conn is None:
            raise ConnectionExpired()
        return self._call.run(invocation)


@dataclass(slots=True)
class WebSocketMessage:
    """Run a raw WebSocket's message listeners for one message it received.

    ``on_auth`` admitted the socket; a message is not asked about again.
    """

    websocket: WebSocket
    data: bytes | str
    label: str | None = "websocket message"
    kind = "message"
    auth = None

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check: the consumer bounded the message's size."""

    def run(self, invocation: Invocation) -> None:
        """Run each listener with ``ctx`` and the message, in order."""
        if invocation.conn is None:
            raise ConnectionExpired()
        with self.websocket.running_in(invocation):
            for listener in self.websocket.listeners("message"):
                invocation.call(listener, invocation.ctx, self.data)


@dataclass(slots=True)
class Disconnect:
    """Remove a connection and run ``on_disconnect`` (best effort)."""

    conn_id: uuid.UUID
    # For the sweep: only remove the row if it is still older than this.
    stale_before: datetime | None = None
    label: str | None = "disconnect"
    # Cleanup must always run: the socket is already gone.
    auth = None

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check."""

    def run(self, invocation: Invocation) -> bool:
        """Delete the row, then run ``on_disconnect``; tell if it existed."""
        rows = Connection.objects.filter(pk=self.conn_id, actor_id=invocation.actor_id)
        if self.stale_before is not None:
            rows = rows.filter(last_seen_at__lt=self.stale_before)
        if not rows.exists():
            return False
        conn = invocation.load_conn(self.conn_id)
        rows.delete()
        if conn is None:  # pragma: no cover - deleted between the two reads
            return False
        # The leaving connection is no longer among ctx.conns, and its state
        # is not written back.
        invocation.remove_conn(self.conn_id)
        if invocation.conn is None:
            invocation.conn = conn
        if invocation.definition.overrides("on_disconnect"):
            # A failing hook must not keep the row alive: its writes roll back
            # to a savepoint (which also keeps PostgreSQL's transaction
            # usable), and its state changes and broadcasts are dropped.
            state_before = cbor_dumps(invocation.state, "state")
            effects = invocation.savepoint_effects()
            try:
                with db.atomic():
                    invocation.call_hook("on_disconnect", conn)
            except Exception:
                logger.exception(
                    "on_disconnect failed actor_id=%s conn_id=%s",
                    invocation.actor_id,
                    self.conn_id,
                )
                invocation.state = cbor_loads(state_before)
                invocation.drop_effects_since(effects)
        return True
