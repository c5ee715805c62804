"""django-rivet: stateful actors and durable workflows for Django.

The public names are imported lazily (PEP 562) so that importing a light
module such as ``django_rivet.engine`` or ``django_rivet.clock``
never drags in Django's model layer.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from .exceptions import (
    ActionNotFound,
    ActionTimeout,
    ActorAlreadyExists,
    ActorBusy,
    ActorNotFound,
    ActorReadOnly,
    ActorUnavailable,
    Forbidden,
    InternalError,
    InvalidArgs,
    InvalidCron,
    InvalidOutput,
    InvalidValue,
    KVKeyTooLarge,
    KVPayloadTooLarge,
    KVTooManyKeys,
    KVValueTooLarge,
    MalformedRequest,
    PartitionKeyRequired,
    QueueFull,
    RequestTooLarge,
    RivetError,
    StateTooLarge,
    StateVersionAhead,
    TooManySchedules,
    UnknownWorkflowQueue,
    UserError,
    WorkflowActive,
    WorkflowDeduplicated,
    WorkflowIdConflict,
    WorkflowInboxFull,
    WorkflowNotFound,
)

try:
    __version__ = version("django-rivet")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0"

if TYPE_CHECKING:
    import django_rivet.actors as actors
    import django_rivet.workflows as workflows

    from .actors.definition import Actor as Actor
    from .actors.definition import action as action
    from .actors.definition import queue_handler as queue_handler

_LAZY_ATTRIBUTES = {
    "Actor": ("django_rivet.actors.definition", "Actor"),
    "action": ("django_rivet.actors.definition", "action"),
    "queue_handler": ("django_rivet.actors.definition", "queue_handler"),
    "actors": ("django_rivet.actors", None),
    "workflows": ("django_rivet.workflows", None),
}

__all__ = [
    "ActionNotFound",
    "ActionTimeout",
    "Actor",
    "ActorAlreadyExists",
    "ActorBusy",
    "ActorNotFound",
    "ActorReadOnly",
    "ActorUnavailable",
    "Forbidden",
    "InternalError",
    "InvalidArgs",
    "InvalidOutput",
    "InvalidValue",
    "InvalidCron",
    "KVKeyTooLarge",
    "KVPayloadTooLarge",
    "KVTooManyKeys",
    "KVValueTooLarge",
    "MalformedRequest",
    "PartitionKeyRequired",
    "QueueFull",
    "RequestTooLarge",
    "RivetError",
    "StateTooLarge",
    "StateVersionAhead",
    "TooManySchedules",
    "UnknownWorkflowQueue",
    "WorkflowActive",
    "UserError",
    "WorkflowDeduplicated",
    "WorkflowIdConflict",
    "WorkflowInboxFull",
    "WorkflowNotFound",
    "__version__",
    "action",
    "actors",
    "queue_handler",
    "workflows",
]


def __getattr__(name: str) -> Any:
    try:
        module_name, attribute = _LAZY_ATTRIBUTES[name]
    except KeyError:
        raise AttributeError(
            f"module 'django_rivet' has no attribute {name!r}"
        ) from None
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value
