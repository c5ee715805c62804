"""The error tree of django-rivet.

Every error a client can see derives from :class:`RivetError` and carries a
stable ``group``/``code`` pair (written ``group/code`` in the docs), a message
and optional metadata. The transports turn them into ``{group, code, message,
metadata}`` bodies with :attr:`RivetError.http_status`. This module imports
nothing from Django so the workflow engine core can use it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ActionNotFound",
    "ActorBusy",
    "ActorUnavailable",
    "AlreadyRegistered",
    "ConnectionExpired",
    "MethodNotAllowed",
    "NotRegistered",
    "ActionTimeout",
    "ActorAlreadyExists",
    "ActorNotFound",
    "EventLogTruncated",
    "EventTooLarge",
    "EventsMissed",
    "Forbidden",
    "InternalError",
    "InvalidArgs",
    "InvalidCron",
    "InvalidEncoding",
    "InvalidKey",
    "KVKeyTooLarge",
    "KVPayloadTooLarge",
    "KVTooManyKeys",
    "KVValueTooLarge",
    "MalformedRequest",
    "QueueFull",
    "QueueMessageTooLarge",
    "ReentrantCall",
    "RequestTooLarge",
    "RivetError",
    "StateTooLarge",
    "TooManyConnections",
    "TooManyFrames",
    "TooManySchedules",
    "UserError",
    "ValueTooDeep",
    "UnknownWorkflowQueue",
    "WorkflowDeduplicated",
    "WorkflowNotFound",
]


class RivetError(Exception):
    """Base of every coded django-rivet error."""

    group: str = "rivet"
    code: str = "error"
    http_status: int = 500
    default_message: str = "An error occurred"

    def __init__(
        self,
        message: str | None = None,
        *,
        metadata: Any = None,
        code: str | None = None,
    ) -> None:
        self.message = message if message is not None else self.default_message
        self.metadata = metadata
        if code is not None:
            self.code = code
        super().__init__(self.message)

    @property
    def qualified_code(self) -> str:
        """Return ``group/code``."""
        return f"{self.group}/{self.code}"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form ``{group, code, message, metadata}``."""
        return {
            "group": self.group,
            "code": self.code,
            "message": self.message,
            "metadata": self.metadata,
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.qualified_code}: {self.message!r})"


class UserError(RivetError):
    """An error a handler raises on purpose; it reaches the client intact."""

    group = "user"
    code = "user_error"
    http_status = 400

    def __init__(
        self, message: str, code: str = "user_error", metadata: Any = None
    ) -> None:
        super().__init__(message, metadata=metadata, code=code)


class InternalError(RivetError):
    """Any unexpected failure, as the wire shows it (details in server logs)."""

    group = "rivet"
    code = "internal_error"
    http_status = 500
    default_message = "An internal error occurred"


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
    """An actor name or key breaks the limits of SPEC 3.1."""

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


class InvalidEncoding(RivetError):
    """The request names an encoding other than ``json`` or ``cbor``."""

    group = "request"
    code = "invalid_encoding"
    http_status = 400
    default_message = "Invalid encoding"


class MalformedRequest(RivetError):
    """The body or frame could not be decoded or has the wrong shape."""

    group = "request"
    code = "malformed"
    http_status = 400
    default_message = "Malformed request"


class RequestTooLarge(RivetError):
    """The body, frame or connection parameters exceed their size limit."""

    group = "request"
    code = "too_large"
    http_status = 413
    default_message = "Request too large"


class InvalidArgs(RivetError):
    """The arguments do not fit the handler's signature."""

    group = "request"
    code = "invalid_args"
    http_status = 400
    default_message = "Invalid arguments"


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


class TooManyFrames(RivetError):
    """A socket sent more frames than ``MAX_PENDING_FRAMES`` ahead of the answers."""

    group = "request"
    code = "too_many_frames"
    http_status = 429
    default_message = "Too many frames waiting to be handled; wait for the answers"


class ValueTooDeep(RivetError, TypeError):
    """A value to store nests more lists and maps than the codec reads back."""

    group = "actor"
    code = "value_too_deep"
    http_status = 400
    default_message = "The value nests too deeply to be stored"


class ConnectionExpired(RivetError):
    """The connection was removed (e.g. by the liveness sweep); reconnect."""

    group = "actor"
    code = "connection_expired"
    http_status = 410
    default_message = "This connection no longer exists; reconnect"


class MethodNotAllowed(RivetError):
    """The route does not answer this HTTP method."""

    group = "request"
    code = "method_not_allowed"
    http_status = 405
    default_message = "Method not allowed"


class WorkflowNotFound(RivetError):
    """No workflow (or workflow definition) has that id or name."""

    group = "workflow"
    code = "not_found"
    http_status = 404
    default_message = "Workflow not found"


class WorkflowDeduplicated(RivetError):
    """A queued or running workflow of the queue holds that deduplication key."""

    group = "workflow"
    code = "duplicate"
    http_status = 409
    default_message = "A workflow with this deduplication key is in the queue"

    @property
    def workflow_id(self) -> str | None:
        """Return the id of the workflow holding the key."""
        found = (self.metadata or {}).get("workflow_id")
        return None if found is None else str(found)


class UnknownWorkflowQueue(RivetError):
    """No queue of that name is configured in ``RIVET["WORKFLOW_QUEUES"]``."""

    group = "workflow"
    code = "unknown_queue"
    http_status = 400


class StateTooLarge(RivetError):
    """The encoded actor (or connection) state is over ``MAX_STATE_BYTES``."""

    group = "actor"
    code = "state_too_large"
    http_status = 400
    default_message = "The actor state is too large"


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


# Wire decoding: ``group/code`` -> class, so clients re-raise the same type.
ERROR_CLASSES: dict[tuple[str, str], type[RivetError]] = {
    (cls.group, cls.code): cls
    for cls in (
        ActorNotFound,
        ActorAlreadyExists,
        ActionNotFound,
        Forbidden,
        ActionTimeout,
        ReentrantCall,
        InvalidKey,
        TooManySchedules,
        InvalidCron,
        KVKeyTooLarge,
        KVValueTooLarge,
        KVTooManyKeys,
        KVPayloadTooLarge,
        EventLogTruncated,
        EventsMissed,
        EventTooLarge,
        InvalidEncoding,
        MalformedRequest,
        RequestTooLarge,
        InvalidArgs,
        QueueFull,
        QueueMessageTooLarge,
        WorkflowNotFound,
        WorkflowDeduplicated,
        UnknownWorkflowQueue,
        ConnectionExpired,
        MethodNotAllowed,
        ValueTooDeep,
        TooManyConnections,
        InternalError,
        StateTooLarge,
        ActorBusy,
        ActorUnavailable,
    )
}


def error_from_dict(data: dict[str, Any]) -> RivetError:
    """Rebuild a :class:`RivetError` from its wire form."""
    group = str(data.get("group", "rivet"))
    code = str(data.get("code", "internal_error"))
    message = str(data.get("message", ""))
    metadata = data.get("metadata")
    if group == "user":
        return UserError(message, code=code, metadata=metadata)
    cls = ERROR_CLASSES.get((group, code))
    if cls is not None:
        return cls(message, metadata=metadata)
    error = RivetError(message, metadata=metadata, code=code)
    error.group = group
    return error


class AlreadyRegistered(ValueError):
    """A different definition is already registered under that name."""


class NotRegistered(LookupError):
    """No definition is registered under that name."""
