"""The ``actor/*`` and ``queue/*`` errors: an actor, its limits, its connections."""

from __future__ import annotations

from .base import RivetError

__all__ = [
    "ActionNotFound",
    "ActionTimeout",
    "ActorAlreadyExists",
    "ActorBusy",
    "ActorNotFound",
    "ActorReadOnly",
    "ActorUnavailable",
    "ConnectionExpired",
    "EventLogTruncated",
    "EventTooLarge",
    "EventsMissed",
    "Forbidden",
    "InvalidCron",
    "InvalidKey",
    "InvalidOutput",
    "InvalidValue",
    "KVKeyTooLarge",
    "KVPayloadTooLarge",
    "KVTooManyKeys",
    "KVValueTooLarge",
    "QueueFull",
    "QueueMessageTooLarge",
    "ReentrantCall",
    "StateTooLarge",
    "StateVersionAhead",
    "TooManyConnections",
    "TooManySchedules",
    "ValueTooDeep",
]


class ActorNotFound(RivetError):
    """The addressed actor (or actor definition) does not exist."""

    group = "actor"
    code = "not_found"
    http_status = 404
    default_message = "Actor not found"


class ActorAlreadyExists(RivetError):
    """``create`` was asked for an actor that already exists."""

    group = "actor"
    code = "already_exists"
    http_status = 409
    default_message = "Actor already exists"


class ActionNotFound(RivetError):
    """The actor has no action (or queue handler) of that name."""

    group = "actor"
    code = "action_not_found"
    http_status = 404
    default_message = "Action not found"


class Forbidden(RivetError):
    """``on_auth`` or ``on_before_connect`` refused the caller."""

    group = "actor"
    code = "forbidden"
    http_status = 403
    default_message = "Forbidden"


class ActionTimeout(RivetError):
    """The invocation ran longer than ``ACTION_TIMEOUT`` and was rolled back."""

    group = "actor"
    code = "action_timeout"
    http_status = 504
    default_message = "Action timed out"


class ReentrantCall(RivetError):
    """A handler called its own actor while its invocation holds the lock."""

    group = "actor"
    code = "reentrant_call"
    http_status = 400
    default_message = "An actor cannot call itself from inside an invocation"


class InvalidKey(RivetError):
    """An actor name or key breaks its limits (docs/actors.md)."""

    group = "actor"
    code = "invalid_key"
    http_status = 400
    default_message = "Invalid actor name or key"


class TooManySchedules(RivetError):
    """The actor already has the maximum number of pending schedules."""

    group = "actor"
    code = "too_many_schedules"
    http_status = 400
    default_message = "Too many pending schedules"


class InvalidCron(RivetError):
    """A cron expression, time zone or interval is invalid."""

    group = "actor"
    code = "invalid_cron"
    http_status = 400
    default_message = "Invalid cron expression"


class KVKeyTooLarge(RivetError):
    """A KV key is over 2048 bytes."""

    group = "actor"
    code = "kv_key_too_large"
    http_status = 400
    default_message = "KV key is too large"


class KVValueTooLarge(RivetError):
    """A KV value is over 128 KiB."""

    group = "actor"
    code = "kv_value_too_large"
    http_status = 400
    default_message = "KV value is too large"


class KVTooManyKeys(RivetError):
    """A ``*_many`` call names more than 128 keys."""

    group = "actor"
    code = "kv_too_many_keys"
    http_status = 400
    default_message = "Too many keys in one KV call"


class KVPayloadTooLarge(RivetError):
    """A ``put_many`` carries more than 976 KiB, or the actor is over 10 GiB."""

    group = "actor"
    code = "kv_payload_too_large"
    http_status = 400
    default_message = "KV payload is too large"


class EventLogTruncated(RivetError):
    """A reconnect asked for events older than the bounded event log keeps."""

    group = "actor"
    code = "event_log_truncated"
    http_status = 400
    default_message = "The event log no longer reaches back that far"


class EventsMissed(RivetError):
    """A connection fell so far behind that the log no longer has its next events."""

    group = "actor"
    code = "events_missed"
    http_status = 410
    default_message = "Events were missed; refetch the state"


class EventTooLarge(RivetError):
    """A broadcast or sent event's arguments exceed ``MAX_EVENT_BYTES``."""

    group = "actor"
    code = "event_too_large"
    http_status = 400
    default_message = "Event is too large"


class QueueFull(RivetError):
    """The actor's queue holds the maximum number of pending messages."""

    group = "queue"
    code = "full"
    http_status = 429
    default_message = "Queue is full"


class QueueMessageTooLarge(RivetError):
    """A queue message body is over 64 KiB."""

    group = "queue"
    code = "message_too_large"
    http_status = 413
    default_message = "Queue message is too large"


class TooManyConnections(RivetError):
    """The actor already holds ``MAX_CONNECTIONS_PER_ACTOR`` connections."""

    group = "actor"
    code = "too_many_connections"
    http_status = 429
    default_message = "The actor has too many connections"


class InvalidValue(RivetError, TypeError):
    """A value outside the value domain (docs/values.md): cannot be stored or sent.

    Its metadata names the ``path`` to the bad value (``state.items[3]``)
    and the ``reason``. Raised where the server's code writes the value
    (state, KV, events, queue bodies, schedule arguments); the invocation
    rolls back. A server error (500): what a client sends outside the
    domain is refused as ``request/malformed`` or ``request/invalid_args``.
    """

    group = "actor"
    code = "invalid_value"
    http_status = 500
    default_message = "The value is outside the value domain"


class InvalidOutput(RivetError):
    """An action returned a value no client could read; nothing was committed."""

    group = "actor"
    code = "invalid_output"
    http_status = 500
    default_message = "The action returned a value outside the value domain"


class ValueTooDeep(InvalidValue):
    """A value to store nests more lists and maps than the codec reads back."""

    group = "actor"
    code = "value_too_deep"
    http_status = 500
    default_message = "The value nests too deeply to be stored"


class ConnectionExpired(RivetError):
    """The connection was removed (e.g. by the liveness sweep); reconnect."""

    group = "actor"
    code = "connection_expired"
    http_status = 410
    default_message = "This connection no longer exists; reconnect"


class StateTooLarge(RivetError):
    """The encoded actor (or connection) state is over ``MAX_STATE_BYTES``."""

    group = "actor"
    code = "state_too_large"
    http_status = 400
    default_message = "The actor state is too large"


class StateVersionAhead(RivetError):
    """The stored state has a newer ``state_version`` than this code knows; nothing ran.

    A process still running the previous deploy met an actor that a newer
    one migrated: retried, the call reaches an upgraded process.
    """

    group = "actor"
    code = "state_version_ahead"
    http_status = 503
    default_message = "The actor's state was written by a newer version of the code"


class ActorBusy(RivetError):
    """The actor stayed locked by other work past ``LOCK_TIMEOUT``; retry."""

    group = "actor"
    code = "busy"
    http_status = 503
    default_message = "The actor is busy; retry later"


class ActorUnavailable(RivetError):
    """The database is unreachable (down, restarting); nothing ran; retry."""

    group = "actor"
    code = "unavailable"
    http_status = 503
    default_message = "The actor is unavailable; retry later"


class ActorReadOnly(RivetError):
    """A read-only action (``@action(readonly=True)``) tried to write; nothing did.

    Raised where it tried: assigning or changing ``ctx.state`` or
    ``conn.state``, a KV write, a schedule, cron job, queue send or
    workflow start, a broadcast or ``conn.send``, ``ctx.destroy()``, an
    ``after_commit`` hook, a call to another actor's writing action, or any
    write of its own to the database. The server code's fault (500).
    """

    group = "actor"
    code = "readonly"
    http_status = 500
    default_message = "A read-only action cannot write"

    @classmethod
    def refusing(cls, what: str) -> ActorReadOnly:
        """Return the error for a read-only action that tried to ``what``."""
        return cls(
            f"A read-only action cannot {what}; drop readonly=True from its "
            "@action to let it write",
            metadata={"write": what},
        )
