"""The ``workflow/*`` errors: starting, finding and messaging workflows."""

from __future__ import annotations

from .base import RivetError

# In the order they are defined.
__all__ = [
    "WorkflowNotFound",
    "WorkflowDeduplicated",
    "WorkflowActive",
    "WorkflowIdConflict",
    "WorkflowInboxFull",
    "UnknownWorkflowQueue",
    "PartitionKeyRequired",
]


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


class PartitionKeyRequired(RivetError, ValueError):
    """A start on a partitioned workflow queue named no ``partition_key``."""

    group = "workflow"
    code = "partition_key_required"
    http_status = 400
    default_message = "The workflow queue is partitioned: give a partition_key"
