"""Start and drive durable workflows: ``from django_rivet import workflows``.

::

    h = workflows.start("order", {"sku": "A1"}, id="order-42")  # idempotent per id
    h = workflows.get("order-42")
    h.status                      # pending|running|sleeping|completed|failed|...
    h.send("approve", {"by": "ann"})
    h.result(timeout=60)          # the output, or raises the failure

Workflows run on Celery workers (``rivet.run_workflow``), or on the
in-process worker (``manage.py rivet_worker``, ``RIVET["EMBEDDED_WORKER"]``);
see ``docs/workflows.md``. Inside an actor invocation (``ctx.workflows``),
``start`` and ``send`` join the invocation's transaction: nothing happens if
the action rolls back, and the run is enqueued once it commits.

Every method doing I/O has an ``a``-prefixed async twin (``astart``, ``aget``,
``handle.asend``...).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction

from . import clock
from .exceptions import WorkflowNotFound
from .workflow import HistoryEntry, WorkflowDefinition, WorkflowError, schema

__all__ = [
    "MAX_ID_LENGTH",
    "WorkflowHandle",
    "aget",
    "astart",
    "get",
    "start",
]

MAX_ID_LENGTH = 255
_POLL_FIRST = 0.02
_POLL_MAX = 0.5


class WorkflowHandle:
    """A reference to one workflow instance."""

    def __init__(self, workflow_id: str, name: str) -> None:
        self.workflow_id = workflow_id
        self.name = name

    def __repr__(self) -> str:
        return f"<WorkflowHandle {self.name} {self.workflow_id}>"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, WorkflowHandle) and other.workflow_id == self.workflow_id
        )

    def __hash__(self) -> int:
        return hash(self.workflow_id)

    # Status and result -----------------------------------------------------------

    @property
    def status(self) -> str:
        """Return the current status (read from the database)."""
        from .models import Workflow

        status = (
            Workflow.objects.filter(pk=self.workflow_id)
            .values_list("status", flat=True)
            .first()
        )
        if status is None:
            raise WorkflowNotFound(f"No workflow has id {self.workflow_id!r}")
        return str(status)

    async def astatus(self) -> str:
        """Async :attr:`status`."""
        return await sync_to_async(lambda: self.status)()

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the workflow to finish; return its output or raise its failure.

        A failed workflow raises its error (the original workflow exception
        class when it is one of django-rivet's, else
        :class:`~django_rivet.workflow.RecordedError` carrying the original
        name); a cancelled one raises ``WorkflowError`` with code
        ``cancelled``. Raises ``TimeoutError`` after ``timeout`` seconds
        (real time: this waits for workers). Something must run the
        workflow meanwhile: a Celery worker, ``rivet_worker``, or in tests
        :func:`django_rivet.testing.run_until_idle`.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = _POLL_FIRST
        while True:
            finished = self._finished()
            if finished is not None:
                return _outcome(self.workflow_id, *finished)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"Workflow {self.workflow_id!r} did not finish within "
                    f"{timeout:g} seconds"
                )
            pause = (
                delay if deadline is None else min(delay, deadline - time.monotonic())
            )
            time.sleep(max(pause, 0.0))
            delay = min(delay * 2, _POLL_MAX)

    async def aresult(self, timeout: float | None = None) -> Any:
        """Async :meth:`result`."""
        import asyncio

        deadline = None if timeout is None else time.monotonic() + timeout
        delay = _POLL_FIRST
        while True:
            finished = await sync_to_async(self._finished)()
            if finished is not None:
                return _outcome(self.workflow_id, *finished)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"Workflow {self.workflow_id!r} did not finish within "
                    f"{timeout:g} seconds"
                )
            pause = (
                delay if deadline is None else min(delay, deadline - time.monotonic())
            )
            await asyncio.sleep(max(pause, 0.0))
            delay = min(delay * 2, _POLL_MAX)

    def _finished(self) -> tuple[str, Any, Any] | None:
        """Return (status, output, error) once finished, else None."""
        from .models import WORKFLOW_FINISHED

        status = self.status
        if status not in WORKFLOW_FINISHED:
            return None
        snapshot = _snapshot(self.workflow_id)
        return status, snapshot.output, snapshot.error

    def snapshot(self) -> Any:
        """Return the stored ``state``, ``output``, ``error`` and ``input``."""
        return _snapshot(self.workflow_id)

    async def asnapshot(self) -> Any:
        """Async :meth:`snapshot`."""
        return await sync_to_async(self.snapshot)()

    # Messages and control ---------------------------------------------------------

    def send(self, name: str, body: Any = None) -> str:
        """Send a message to the workflow (``ctx.messages``); return its id.

        The message is stored durably and the workflow woken (after commit)
        if it waits for that name.
        """
        from .workflow_runtime import operations

        return operations.send(self.workflow_id, name, body)

    async def asend(self, name: str, body: Any = None) -> str:
        """Async :meth:`send`."""
        return await sync_to_async(self.send)(name, body)

    def wake(self) -> bool:
        """Run the workflow now (a sleep not yet due is slept again)."""
        from .workflow_runtime import operations

        return operations.wake(self.workflow_id)

    async def awake(self) -> bool:
        """Async :meth:`wake`."""
        return await sync_to_async(self.wake)()

    def cancel(self) -> bool:
        """Cancel the workflow for good; return False if it had finished.

        A workflow no worker is running is cancelled at once; a running one
        stops at its next history write.
        """
        from .workflow_runtime import operations

        return operations.cancel(self.workflow_id)

    async def acancel(self) -> bool:
        """Async :meth:`cancel`."""
        return await sync_to_async(self.cancel)()

    def recover(self) -> bool:
        """Let a failed workflow run again from its failed steps.

        Returns False (and changes nothing) unless the workflow failed.
        """
        from .workflow_runtime import operations

        return operations.recover(self.workflow_id)

    async def arecover(self) -> bool:
        """Async :meth:`recover`."""
        return await sync_to_async(self.recover)()

    def history(self) -> list[HistoryEntry]:
        """Return the decoded history entries, in the order they were created."""
        from .models import WorkflowKV

        _require(self.workflow_id)
        rows = (
            WorkflowKV.objects.filter(workflow_id=self.workflow_id)
            .order_by("key")
            .values_list("key", "value")
        )
        return schema.decode_history((bytes(k), bytes(v)) for k, v in rows)

    async def ahistory(self) -> list[HistoryEntry]:
        """Async :meth:`history`."""
        return await sync_to_async(self.history)()

    def replay_from(self, entry_id: str | None = None) -> list[HistoryEntry]:
        """Re-run from the step ``entry_id`` (every entry after it is deleted).

        Without ``entry_id`` the workflow starts over with the same input.
        Returns the remaining history; raises ``ReplayRefusedError`` while a
        worker runs the workflow.
        """
        from .workflow_runtime import operations

        return operations.replay(self.workflow_id, entry_id)

    async def areplay_from(self, entry_id: str | None = None) -> list[HistoryEntry]:
        """Async :meth:`replay_from`."""
        return await sync_to_async(self.replay_from)(entry_id)


def _require(workflow_id: str) -> None:
    from .models import Workflow

    if not Workflow.objects.filter(pk=workflow_id).exists():
        raise WorkflowNotFound(f"No workflow has id {workflow_id!r}")


def _snapshot(workflow_id: str) -> Any:
    from .models import WorkflowKV
    from .workflow import keys
    from .workflow.ops import WorkflowSnapshot

    _require(workflow_id)
    low, high = keys.range_of((keys.WORKFLOW,))
    rows = WorkflowKV.objects.filter(
        workflow_id=workflow_id, key__gte=low, key__lt=high
    ).values_list("key", "value")
    values: dict[int, Any] = {}
    for key, value in rows:
        field = keys.unpack(bytes(key))[1]
        values[field] = schema.decode_workflow_field(field, bytes(value))
    return WorkflowSnapshot(
        state=values.get(keys.WORKFLOW_STATE, "pending"),
        output=values.get(keys.WORKFLOW_OUTPUT),
        error=values.get(keys.WORKFLOW_ERROR),
        input=values.get(keys.WORKFLOW_INPUT),
    )


def _outcome(workflow_id: str, status: str, output: Any, error: Any) -> Any:
    from .workflow.errors import error_from_info

    if status == "completed":
        return output
    if status == "cancelled":
        raise WorkflowError(f"Workflow {workflow_id!r} was cancelled", code="cancelled")
    raise error_from_info(error)


# -- start / get -----------------------------------------------------------------------
def _definition(workflow: str | WorkflowDefinition) -> WorkflowDefinition:
    from .workflow_runtime import registry

    if not isinstance(workflow, WorkflowDefinition):
        return registry.get(workflow)
    # Workers look definitions up by name: an unregistered one could never run.
    if registry.all_workflows().get(workflow.name) != workflow:
        raise WorkflowNotFound(f"Workflow {workflow.name!r} is not registered")
    return workflow


def start(
    workflow: str | WorkflowDefinition, input: Any = None, id: str | None = None
) -> WorkflowHandle:
    """Start the workflow ``workflow`` (a registered name) with ``input``.

    Idempotent per ``id``: starting an id that exists returns its handle and
    changes nothing (a different workflow name under that id is a
    ``ValueError``). Without ``id`` a random one is used. The input is
    validated and stored now; raises ``workflow/not_found`` for an unknown
    name and ``StepOutputError`` for an input that cannot be stored. The
    first run is enqueued when the surrounding transaction commits.
    """
    from .models import Workflow, WorkflowKV, WorkflowStatus
    from .workflow import keys
    from .workflow_runtime import wakeups

    definition = _definition(workflow)
    workflow_id = uuid.uuid4().hex if id is None else str(id)
    if not workflow_id or len(workflow_id) > MAX_ID_LENGTH:
        raise ValueError(f"A workflow id is 1-{MAX_ID_LENGTH} characters")
    stored = schema.roundtrip(input, "Workflow input")
    encoded = schema.encode_workflow_field(keys.WORKFLOW_INPUT, stored)
    now = clock.now_datetime()
    with transaction.atomic():
        row, created = Workflow.objects.get_or_create(
            id=workflow_id,
            defaults={
                "name": definition.name,
                "status": WorkflowStatus.PENDING,
                "wake_at": now,
                "created_at": now,
                "updated_at": now,
                **wakeups.wake_fields(now),
            },
        )
        if not created:
            if row.name != definition.name:
                raise ValueError(
                    f"Workflow id {workflow_id!r} is already used by a "
                    f"{row.name!r} workflow"
                )
            return WorkflowHandle(workflow_id, row.name)
        WorkflowKV.objects.create(
            workflow=row, key=keys.workflow_key(keys.WORKFLOW_INPUT), value=encoded
        )
        wakeups.schedule_wake(workflow_id, now)
    return WorkflowHandle(workflow_id, definition.name)


async def astart(
    workflow: str | WorkflowDefinition, input: Any = None, id: str | None = None
) -> WorkflowHandle:
    """Async :func:`start`."""
    return await sync_to_async(start)(workflow, input, id)


def get(workflow_id: str) -> WorkflowHandle:
    """Return the handle of an existing workflow or raise ``workflow/not_found``."""
    from .models import Workflow

    name = Workflow.objects.filter(pk=workflow_id).values_list("name", flat=True)
    found = name.first()
    if found is None:
        raise WorkflowNotFound(f"No workflow has id {workflow_id!r}")
    return WorkflowHandle(workflow_id, found)


async def aget(workflow_id: str) -> WorkflowHandle:
    """Async :func:`get`."""
    return await sync_to_async(get)(workflow_id)
