"""What a task's workflow records, read back as Django's ``TaskResult``.

A task is a workflow of the built-in ``rivet.task`` definition
(:mod:`.runner`). Its history holds, per attempt ``N``, the steps
``attempt N`` (the worker and the time it began), ``attempt N run`` (the
call: its output is the return value, or its failure) and, when it failed,
``attempt N error`` (the exception's class path and traceback); the
workflow row gives the status and the times. :func:`read` maps both onto a
``TaskResult``, and :class:`Attempts` is the same record kept in memory by
the run in progress.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils.module_loading import import_string

from .. import clock
from ..engine import HistoryEntry
from ..models import TASK_WORKFLOW, Workflow, WorkflowStatus
from ..workflows import operations
from . import compat

__all__ = ["TASK_WORKFLOW", "Attempts", "TaskSpec", "read", "recorded", "status_of"]

_ATTEMPT = re.compile(r"^attempt (\d+)( run| error)?$")

_STATUSES: dict[str, str] = {
    WorkflowStatus.RUNNING: "RUNNING",
    WorkflowStatus.COMPLETED: "SUCCESSFUL",
    WorkflowStatus.FAILED: "FAILED",
    WorkflowStatus.CANCELLED: "FAILED",
}


def status_of(workflow_status: str) -> compat.TaskResultStatus:
    """Return the task status of a workflow status (READY while it waits)."""
    return compat.TaskResultStatus[_STATUSES.get(workflow_status, "READY")]


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """The input of a task's workflow: what to call, how, and where."""

    path: str
    args: list[Any]
    kwargs: dict[str, Any]
    backend: str
    queue_name: str
    priority: int
    max_retries: int
    run_after: float | None = None

    def to_input(self) -> dict[str, Any]:
        """Return the workflow input (stored with the workflow)."""
        # Not dataclasses.asdict(): its deep copy of the arguments cost a
        # tenth of an enqueue, and the input is encoded right away.
        return {name: getattr(self, name) for name in _SPEC_FIELDS}

    @classmethod
    def from_input(cls, data: dict[str, Any]) -> TaskSpec:
        """Read the workflow input back."""
        return cls(**data)

    def task(self) -> compat.Task[..., Any]:
        """Return the ``Task`` (imported by its path), as it was enqueued."""
        found = import_string(self.path)
        if not isinstance(found, compat.Task):
            raise TypeError(f"{self.path} is not a task")
        run_after = None if self.run_after is None else _aware(self.run_after)
        options = (self.priority, self.queue_name, self.backend, run_after)
        own = (found.priority, found.queue_name, found.backend, found.run_after)
        if own == options:
            return found  # most tasks: ``using()`` would copy and validate it again
        return found.using(
            priority=self.priority,
            queue_name=self.queue_name,
            backend=self.backend,
            run_after=run_after,
        )


_SPEC_FIELDS = tuple(spec_field.name for spec_field in dataclasses.fields(TaskSpec))


@dataclass(slots=True)
class Attempts:
    """The attempts of one task so far: who ran them, when, what they raised."""

    worker_ids: list[str] = field(default_factory=list)
    errors: list[compat.TaskError] = field(default_factory=list)
    started_at: datetime | None = None
    last_attempted_at: datetime | None = None

    def begin(self, record: dict[str, Any]) -> None:
        """Add an attempt that began (``{"worker": id, "at": timestamp}``)."""
        at = _aware(float(record["at"]))
        self.worker_ids.append(str(record["worker"]))
        self.started_at = self.started_at or at
        self.last_attempted_at = at

    def fail(self, record: dict[str, Any]) -> None:
        """Add an attempt's error (``{"path": class path, "traceback": text}``)."""
        self.errors.append(
            compat.TaskError(
                exception_class_path=str(record["path"]),
                traceback=str(record["traceback"]),
            )
        )

    def result(
        self,
        task: compat.Task[..., Any],
        result_id: str,
        spec: TaskSpec,
        status: compat.TaskResultStatus,
        enqueued_at: datetime | None,
        finished_at: datetime | None = None,
    ) -> compat.TaskResult[..., Any]:
        """Return the ``TaskResult`` these attempts make."""
        return compat.TaskResult(
            task=task,
            id=result_id,
            status=status,
            enqueued_at=enqueued_at,
            started_at=self.started_at,
            last_attempted_at=self.last_attempted_at,
            finished_at=finished_at,
            args=spec.args,
            kwargs=spec.kwargs,
            backend=spec.backend,
            errors=list(self.errors),
            worker_ids=list(self.worker_ids),
        )


def _aware(timestamp: float) -> datetime:
    return clock.to_datetime(timestamp)


def _attempts(history: list[HistoryEntry]) -> Attempts:
    """Return the attempts the history recorded."""
    attempts = Attempts()
    for entry in history:
        found = _ATTEMPT.match(entry.location)
        if found is None or entry.kind != "step":
            continue
        if found.group(2) is None and entry.status == "completed":
            attempts.begin(entry.output)
        elif found.group(2) == " error" and entry.status == "completed":
            attempts.fail(entry.output)
    return attempts


def recorded(result_id: str) -> tuple[TaskSpec, Attempts, Any]:
    """Return what the task's workflow stored: its spec, attempts and output."""
    snapshot = operations.snapshot(result_id)
    attempts = _attempts(operations.history(result_id))
    return TaskSpec.from_input(snapshot.input), attempts, snapshot.output


def read(result_id: str) -> compat.TaskResult[..., Any]:
    """Return the ``TaskResult`` of the task ``result_id`` as stored now.

    Raises ``TaskResultDoesNotExist`` for an id that is no task (or one that
    retention purged).
    """
    row = (
        Workflow.objects.filter(pk=str(result_id), name=TASK_WORKFLOW)
        .values_list("status", "created_at", "updated_at", "finished_at", "lease_owner")
        .first()
    )
    if row is None:
        raise compat.TaskResultDoesNotExist(result_id)
    state, enqueued_at, updated_at, finished_at, owner = row
    spec, attempts, output = recorded(result_id)
    status = status_of(state)
    if status == compat.TaskResultStatus.RUNNING:
        # The attempt in progress is recorded when it ends: its worker holds
        # the lease, claimed when it began.
        attempts.worker_ids.append(owner or "")
        attempts.started_at = attempts.started_at or updated_at
        attempts.last_attempted_at = updated_at
    result = attempts.result(
        spec.task(), str(result_id), spec, status, enqueued_at, finished_at
    )
    if status == compat.TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", output)
    return result
