"""The ``workflow/*`` errors: starting, finding and messaging workflows."""

from __future__ import annotations

from typing import Any

from .base import RivetError

# In the order they are defined.
__all__ = [
    "InvalidQueueArguments",
    "PartitionKeyRequired",
    "ScheduleExists",
    "ScheduleNotFound",
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


class WorkflowNotFound(RivetError):
    """No workflow (or workflow definition) has that id or name."""

    group = "workflow"
    code = "not_found"
    http_status = 404
    default_message = "Workflow not found"


class ScheduleNotFound(WorkflowNotFound):
    """No workflow schedule has that name (also a ``WorkflowNotFound``)."""

    code = "schedule_not_found"
    default_message = "Workflow schedule not found"


class ScheduleExists(RivetError, ValueError):
    """A workflow schedule of that name exists (also a ``ValueError``)."""

    group = "workflow"
    code = "schedule_exists"
    http_status = 409
    default_message = "A workflow schedule of that name exists"


class WorkflowDeduplicated(RivetError):
    """A queued or running workflow of the queue holds that deduplication key.

    What a client may see (the message, ``metadata``) names the queue only:
    the holder may be another caller's workflow. Server code reads the
    holder's id from ``workflow_id``, which is not sent.
    """

    group = "workflow"
    code = "duplicate"
    http_status = 409
    default_message = "A workflow with this deduplication key is in the queue"

    def __init__(
        self,
        message: str | None = None,
        *,
        metadata: Any = None,
        code: str | None = None,
        holder: str | None = None,
    ) -> None:
        super().__init__(message, metadata=metadata, code=code)
        self.holder = holder

    @property
    def workflow_id(self) -> str | None:
        """Return the id of the workflow holding the key (server side only)."""
        return self.holder


class InvalidQueueArguments(RivetError, ValueError, TypeError):
    """A start's ``queue``, ``priority``, ``dedup_key`` or ``debounce`` is out of range.

    Also a ``ValueError`` and a ``TypeError``, what these arguments raised
    before they had a code.
    """

    group = "workflow"
    code = "invalid_queue_args"
    http_status = 400
    default_message = "Invalid queue arguments"


class WorkflowQueueFull(RivetError):
    """The queue holds its ``max_queued`` workflows waiting to start."""

    group = "workflow"
    code = "queue_full"
    http_status = 429
    default_message = "The workflow queue is full"


class WorkflowFinished(RivetError):
    """The workflow has finished: it takes no more messages."""

    group = "workflow"
    code = "finished"
    http_status = 409
    default_message = "The workflow has finished"


class WorkflowCannotWait(RivetError):
    """A wait for a workflow was asked for inside an actor invocation.

    Waiting there would hold the invocation's transaction (on SQLite, every
    write of the process) while nothing can change: what the wait sends is
    not committed, so no worker sees it.
    """

    group = "workflow"
    code = "cannot_wait"
    http_status = 500
    default_message = (
        "A wait for a workflow cannot run inside an actor invocation (it "
        "would hold the invocation's transaction)"
    )


class WorkflowActive(RivetError):
    """The workflow has not finished: cancel it first."""

    group = "workflow"
    code = "active"
    http_status = 409
    default_message = "The workflow has not finished"


class WorkflowIdConflict(RivetError, ValueError):
    """The workflow id is already used by a workflow of another name."""

    group = "workflow"
    code = "id_conflict"
    http_status = 409
    default_message = "The workflow id is used by another workflow"


class WorkflowInboxFull(RivetError):
    """The workflow holds as many unreceived messages as it may."""

    group = "workflow"
    code = "inbox_full"
    http_status = 429
    default_message = "The workflow's inbox is full"


class UnknownWorkflowQueue(RivetError):
    """No queue of that name is configured in ``RIVET["WORKFLOW_QUEUES"]``."""

    group = "workflow"
    code = "unknown_queue"
    http_status = 400


class WorkflowForbidden(RivetError):
    """Reading the workflow's stream over HTTP is not allowed (or it does not exist)."""

    group = "workflow"
    code = "forbidden"
    http_status = 403
    default_message = "Reading this workflow's streams is not allowed"


class PartitionKeyRequired(RivetError, ValueError):
    """A start on a partitioned workflow queue named no ``partition_key``."""

    group = "workflow"
    code = "partition_key_required"
    http_status = 400
    default_message = "The workflow queue is partitioned: give a partition_key"
