"""The error tree of django-rivet.

Every error a client can see derives from :class:`RivetError` and carries a
stable ``group``/``code`` pair (written ``group/code`` in the docs), a message
and optional metadata. The transports turn them into ``{group, code, message,
metadata}`` bodies with :attr:`RivetError.http_status`; ``error_from_dict``
turns such a body back into the same class (``ERROR_CLASSES``). This module
imports nothing from Django so the workflow engine core can use it.

This is the one public home of every error (docs/protocol.md lists the same
``group/code`` pairs). The classes are written by group in
``django_rivet/_errors/`` (``base``, ``actor``, ``request``, ``workflow``);
a new code goes there, into ``__all__`` and, if clients should re-raise its
class, into ``ERROR_CLASSES``.
"""

from __future__ import annotations

from typing import Any

from ._errors.actor import (
    ActionNotFound,
    ActionTimeout,
    ActorAlreadyExists,
    ActorBusy,
    ActorNotFound,
    ActorReadOnly,
    ActorUnavailable,
    ConnectionExpired,
    EventLogTruncated,
    EventsMissed,
    EventTooLarge,
    Forbidden,
    InvalidCron,
    InvalidKey,
    InvalidOutput,
    InvalidValue,
    KVKeyTooLarge,
    KVPayloadTooLarge,
    KVTooManyKeys,
    KVValueTooLarge,
    QueueFull,
    QueueMessageTooLarge,
    ReentrantCall,
    StateTooLarge,
    StateVersionAhead,
    TooManyConnections,
    TooManySchedules,
    ValueTooDeep,
)
from ._errors.base import (
    InternalError,
    NoChannelLayer,
    RivetError,
    UserError,
)
from ._errors.request import (
    InvalidArgs,
    InvalidEncoding,
    MalformedRequest,
    MethodNotAllowed,
    RequestTooLarge,
    TooManyFrames,
)
from ._errors.workflow import (
    InvalidQueueArguments,
    PartitionKeyRequired,
    ScheduleExists,
    ScheduleNotFound,
    UnknownWorkflowQueue,
    WorkflowActive,
    WorkflowCannotWait,
    WorkflowDeduplicated,
    WorkflowFinished,
    WorkflowForbidden,
    WorkflowIdConflict,
    WorkflowInboxFull,
    WorkflowNotFound,
    WorkflowQueueFull,
)

__all__ = [
    "ActionNotFound",
    "ActorBusy",
    "ActorReadOnly",
    "ActorUnavailable",
    "AlreadyRegistered",
    "ConnectionExpired",
    "MethodNotAllowed",
    "NoChannelLayer",
    "NotRegistered",
    "PartitionKeyRequired",
    "ActionTimeout",
    "ActorAlreadyExists",
    "ActorNotFound",
    "EventLogTruncated",
    "EventTooLarge",
    "EventsMissed",
    "Forbidden",
    "InternalError",
    "InvalidArgs",
    "InvalidOutput",
    "InvalidValue",
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
    "ScheduleExists",
    "ScheduleNotFound",
    "StateTooLarge",
    "StateVersionAhead",
    "TooManyConnections",
    "TooManyFrames",
    "TooManySchedules",
    "UserError",
    "ValueTooDeep",
    "InvalidQueueArguments",
    "UnknownWorkflowQueue",
    "WorkflowActive",
    "WorkflowCannotWait",
    "WorkflowDeduplicated",
    "WorkflowFinished",
    "WorkflowForbidden",
    "WorkflowIdConflict",
    "WorkflowInboxFull",
    "WorkflowNotFound",
    "WorkflowQueueFull",
]


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
        ScheduleNotFound,
        ScheduleExists,
        WorkflowDeduplicated,
        PartitionKeyRequired,
        WorkflowActive,
        WorkflowForbidden,
        WorkflowIdConflict,
        UnknownWorkflowQueue,
        InvalidQueueArguments,
        WorkflowQueueFull,
        WorkflowFinished,
        WorkflowCannotWait,
        WorkflowInboxFull,
        ConnectionExpired,
        MethodNotAllowed,
        ValueTooDeep,
        TooManyConnections,
        InternalError,
        StateTooLarge,
        StateVersionAhead,
        ActorBusy,
        ActorUnavailable,
        ActorReadOnly,
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


# Tracebacks, pickles, the docs and error.type in traces name the classes
# by their public home.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
