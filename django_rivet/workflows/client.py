"""Start and drive durable workflows: ``from django_rivet import workflows``.

::

    h = workflows.start("order", {"sku": "A1"}, id="order-42")  # idempotent per id
    h = workflows.get("order-42")
    h.status                      # queued|pending|running|sleeping|completed|...
    h.send("approve", {"by": "ann"})
    h.result(timeout=60)          # the output, or raises the failure
    h.request("ask", {...}, timeout=30)   # send, and wait for ctx.reply's value
    h.get_event("progress")       # the latest ctx.set_event("progress", ...)
    workflows.filter(status="failed", name="order")   # handles, newest first

Workflows run on Celery workers (``rivet.run_workflow``), or on the
in-process worker (``manage.py rivet_worker``, ``RIVET["EMBEDDED_WORKER"]``);
see ``docs/workflows.md``. Inside an actor invocation (``ctx.workflows``),
``start`` and ``send`` join the invocation's transaction: nothing happens if
the action rolls back, and the run is enqueued once it commits.

Every method doing I/O has an ``a``-prefixed async twin (``astart``, ``aget``,
``handle.asend``...).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any, Unpack

from asgiref.sync import sync_to_async

from ..engine import (
    HistoryEntry,
    Message,
    ReplayDivergence,
    WorkflowDefinition,
)
from ..engine.ops import WorkflowSnapshot
from ..engine.values import seconds
from . import attributes as workflow_attributes
from . import control, operations, published, queries, results

__all__ = [
    "MAX_ID_LENGTH",
    "WorkflowHandle",
    "acount",
    "adelete",
    "afilter",
    "aget",
    "astart",
    "count",
    "delete",
    "filter",
    "get",
    "start",
]

MAX_ID_LENGTH = operations.MAX_ID_LENGTH


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
        return operations.status(self.workflow_id)

    async def astatus(self) -> str:
        """Async :attr:`status`."""
        return await sync_to_async(operations.status)(self.workflow_id)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the workflow to finish; return its output or raise its failure.

        A failed workflow raises its error (the original workflow exception
        class when it is one of django-rivet's, else
        :class:`~django_rivet.engine.RecordedError` carrying the original
        name); a cancelled one raises ``WorkflowCancelled`` (code
        ``cancelled``), or ``WorkflowTimeout`` (``workflow/timeout``) when its
        deadline passed. Raises ``TimeoutError`` after ``timeout`` seconds
        (real time: this waits for workers); its message says when the
        workflow never started, which means no worker runs. Something must
        run the workflow meanwhile: a Celery worker, ``rivet_worker``, the
        embedded worker, or in tests :func:`django_rivet.testing.run_until_idle`.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = results.POLL_FIRST
        while True:
            finished = results.finished(self.workflow_id)
            if finished is not None:
                return results.outcome(self.workflow_id, *finished)
            pause = results.pause(deadline, delay)
            if pause is None:
                raise results.timed_out(self.workflow_id, timeout)
            time.sleep(pause)
            delay = min(delay * 2, results.POLL_MAX)

    async def aresult(self, timeout: float | None = None) -> Any:
        """Async :meth:`result`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = results.POLL_FIRST
        while True:
            finished = await sync_to_async(results.finished)(self.workflow_id)
            if finished is not None:
                return results.outcome(self.workflow_id, *finished)
            pause = results.pause(deadline, delay)
            if pause is None:
                raise await sync_to_async(results.timed_out)(self.workflow_id, timeout)
            await asyncio.sleep(pause)
            delay = min(delay * 2, results.POLL_MAX)

    def snapshot(self) -> WorkflowSnapshot:
        """Return the stored ``state``, ``output``, ``error`` and ``input``."""
        return operations.snapshot(self.workflow_id)

    async def asnapshot(self) -> WorkflowSnapshot:
        """Async :meth:`snapshot`."""
        return await sync_to_async(self.snapshot)()

    # Messages and control ---------------------------------------------------------

    def send(self, name: str, body: Any = None) -> str:
        """Send a message to the workflow (``ctx.messages``); return its id.

        The message is stored durably and the workflow woken (after commit)
        if it waits for that name. A body that cannot be stored raises
        ``TypeError``; one over ``MAX_MESSAGE_BODY_BYTES`` encoded raises
        ``StorageLimitError`` (``workflow/storage_limit``) and sends nothing.
        """
        return operations.send(self.workflow_id, name, body)

    async def asend(self, name: str, body: Any = None) -> str:
        """Async :meth:`send`."""
        return await sync_to_async(self.send)(name, body)

    def wake(self) -> bool:
        """Run the workflow now (a sleep not yet due is slept again)."""
        return operations.wake(self.workflow_id)

    async def awake(self) -> bool:
        """Async :meth:`wake`."""
        return await sync_to_async(self.wake)()

    def cancel(self) -> bool:
        """Cancel the workflow for good; return False if it had finished.

        Its status is ``cancelled`` as soon as this returns, and no further
        step function or child starts; the step running now (if any)
        finishes. The rollback handlers of its completed steps run here when
        no worker holds it, else on that worker.
        """
        return operations.cancel(self.workflow_id)

    async def acancel(self) -> bool:
        """Async :meth:`cancel`."""
        return await sync_to_async(self.cancel)()

    def recover(self) -> bool:
        """Let a failed workflow run again from its failed steps.

        Returns False (and changes nothing) unless the workflow failed.
        """
        return operations.recover(self.workflow_id)

    async def arecover(self) -> bool:
        """Async :meth:`recover`."""
        return await sync_to_async(self.recover)()

    def resume(self) -> bool:
        """Let a cancelled workflow go on from where it stopped; start a queued one.

        A queued workflow starts at once, outside its queue's limits. Returns
        False (and changes nothing) unless it is queued, or cancelled with no
        rollback handler run for it. A resumed cancelled workflow's deadline
        is dropped.
        """
        return control.resume(self.workflow_id)

    async def aresume(self) -> bool:
        """Async :meth:`resume`."""
        return await sync_to_async(self.resume)()

    def delete(self, children: bool = False) -> bool:
        """Delete the finished workflow and every row it owns; tell if it did.

        ``children``: its descendants too. One that has not finished raises
        ``WorkflowActive`` (``workflow/active``): cancel it first. An id
        already deleted returns False.
        """
        return control.delete([self.workflow_id], children=children) > 0

    async def adelete(self, children: bool = False) -> bool:
        """Async :meth:`delete`."""
        return await sync_to_async(self.delete)(children)

    # Family, replies and published values --------------------------------------

    @property
    def parent_id(self) -> str | None:
        """Return the id of the workflow that started this one (None: top-level)."""
        return control.parent_of(self.workflow_id)

    async def aparent_id(self) -> str | None:
        """Async :attr:`parent_id`."""
        return await sync_to_async(control.parent_of)(self.workflow_id)

    def request(self, name: str, body: Any = None, timeout: float | None = None) -> Any:
        """Send message ``name`` and return the value the workflow replies.

        The workflow receives it with ``ctx.messages`` and answers with
        ``ctx.reply(..., message, value)``. Raises ``WorkflowRequestTimeout``
        (``workflow/request_timeout``) after ``timeout`` seconds (default
        ``RIVET["ACTION_TIMEOUT"]``) and ``WorkflowNoReply``
        (``workflow/no_reply``) at once if the workflow ends without
        replying. While no worker has picked the workflow up, this runs it
        here up to its reply (so it works without a worker and inside an
        action's transaction).
        """
        return published.request(self.workflow_id, name, body, timeout)

    async def arequest(
        self, name: str, body: Any = None, timeout: float | None = None
    ) -> Any:
        """Async :meth:`request`."""
        return await published.arequest(self.workflow_id, name, body, timeout)

    def get_event(self, key: str, timeout: float | None = None) -> Any:
        """Return the latest value the workflow published under ``key``.

        Without ``timeout``, None at once if it was never set; with one, wait
        up to ``timeout`` seconds for a first value (None if none came, or
        as soon as the workflow finished without setting it).
        """
        return published.get_event(self.workflow_id, key, timeout)

    async def aget_event(self, key: str, timeout: float | None = None) -> Any:
        """Async :meth:`get_event`."""
        return await published.aget_event(self.workflow_id, key, timeout)

    def get_events(self) -> dict[str, Any]:
        """Return every value the workflow published, ``{key: latest value}``.

        Raises ``workflow/not_found`` for an id no workflow has (DBOS
        returns an empty mapping; see docs/workflows.md).
        """
        return published.read_events(self.workflow_id)

    async def aget_events(self) -> dict[str, Any]:
        """Async :meth:`get_events`."""
        return await sync_to_async(self.get_events)()

    def messages(self) -> list[Message]:
        """Return the messages sent to the workflow and not received yet.

        Oldest first, as :class:`~django_rivet.engine.Message` objects
        (``id``, ``name``, ``body``, ``created_at``).
        """
        return operations.inbox(self.workflow_id)

    async def amessages(self) -> list[Message]:
        """Async :meth:`messages`."""
        return await sync_to_async(self.messages)()

    @property
    def attributes(self) -> dict[str, str | int]:
        """Return the attributes the workflow was started with (``{}``: none)."""
        return workflow_attributes.read(self.workflow_id)

    async def aattributes(self) -> dict[str, str | int]:
        """Async :attr:`attributes`."""
        return await sync_to_async(workflow_attributes.read)(self.workflow_id)

    def check_replay(self) -> ReplayDivergence | None:
        """Replay the history against the deployed code, running nothing.

        Returns None if it fits, else where and why it diverges: what a run
        of this workflow would hit (``manage.py rivet_check_replay`` does
        this for every workflow in flight).
        """
        return control.check(self.workflow_id)

    async def acheck_replay(self) -> ReplayDivergence | None:
        """Async :meth:`check_replay`."""
        return await sync_to_async(self.check_replay)()

    def history(self) -> list[HistoryEntry]:
        """Return the decoded history entries, in the order they were created."""
        return operations.history(self.workflow_id)

    async def ahistory(self) -> list[HistoryEntry]:
        """Async :meth:`history`."""
        return await sync_to_async(self.history)()

    def replay_from(self, entry_id: str | None = None) -> list[HistoryEntry]:
        """Re-run from the step ``entry_id`` (every entry after it is deleted).

        Without ``entry_id`` the workflow starts over with the same input.
        Returns the remaining history; raises ``ReplayRefusedError`` while a
        worker runs the workflow.
        """
        return operations.replay(self.workflow_id, entry_id)

    async def areplay_from(self, entry_id: str | None = None) -> list[HistoryEntry]:
        """Async :meth:`replay_from`."""
        return await sync_to_async(self.replay_from)(entry_id)


# -- start / get -----------------------------------------------------------------------
def start(
    workflow: str | WorkflowDefinition,
    input: Any = None,
    id: str | None = None,
    *,
    queue: str | None = None,
    priority: int = 0,
    dedup_key: str | None = None,
    timeout: float | timedelta | None = None,
    attributes: Mapping[str, str | int] | None = None,
) -> WorkflowHandle:
    """Start the workflow ``workflow`` (a registered name) with ``input``.

    Idempotent per ``id``: starting an id that exists returns its handle and
    changes nothing (a different workflow name under that id is a
    ``ValueError``). Without ``id`` a random one is used. The input is
    validated and stored now; raises ``workflow/not_found`` for an unknown
    name, ``StepOutputError`` for an input that cannot be stored and
    ``StorageLimitError`` (``workflow/storage_limit``) for one too large to
    store. The first run is enqueued when the surrounding transaction commits.

    With ``queue`` (a name in ``RIVET["WORKFLOW_QUEUES"]``, else
    ``workflow/unknown_queue``) the workflow is ``queued`` until its queue's
    limits let it start, lowest ``priority`` first; a ``dedup_key`` held by
    a queued or running workflow of that queue raises ``WorkflowDeduplicated``
    (``workflow/duplicate``, with the holder's id). ``timeout`` (seconds or a
    timedelta; default: the ``@workflow``'s) is the deadline: when it passes
    the workflow is cancelled with reason ``timeout`` (its rollbacks run) and
    ``result()`` raises ``WorkflowTimeout``. ``attributes`` (strings and
    integers by name, at most 32) are stored with a new workflow for
    :func:`filter` to find it by. See docs/workflows.md.
    """
    limit = seconds(timeout)
    if limit is not None and limit <= 0:
        raise ValueError("A workflow timeout must be positive")
    definition = operations.definition_of(workflow)
    workflow_id, name = operations.start(
        definition,
        input,
        id,
        queue=queue,
        priority=priority,
        dedup_key=dedup_key,
        timeout=limit,
        attributes=attributes,
    )
    return WorkflowHandle(workflow_id, name)


async def astart(
    workflow: str | WorkflowDefinition,
    input: Any = None,
    id: str | None = None,
    *,
    queue: str | None = None,
    priority: int = 0,
    dedup_key: str | None = None,
    timeout: float | timedelta | None = None,
    attributes: Mapping[str, str | int] | None = None,
) -> WorkflowHandle:
    """Async :func:`start`."""
    return await sync_to_async(start)(
        workflow,
        input,
        id,
        queue=queue,
        priority=priority,
        dedup_key=dedup_key,
        timeout=timeout,
        attributes=attributes,
    )


def get(workflow_id: str) -> WorkflowHandle:
    """Return the handle of an existing workflow or raise ``workflow/not_found``."""
    return WorkflowHandle(workflow_id, operations.name_of(workflow_id))


async def aget(workflow_id: str) -> WorkflowHandle:
    """Async :func:`get`."""
    return await sync_to_async(get)(workflow_id)


# -- search ----------------------------------------------------------------------------
def filter(  # noqa: A001 - the public name the API documents
    *,
    order: str = "desc",
    offset: int = 0,
    limit: int | None = 100,
    **filters: Unpack[queries.Filters],
) -> list[WorkflowHandle]:
    """Return handles of the workflows matching every filter, newest first.

    The filters (all optional, combined with AND): ``name`` (one or a
    list), ``status`` (one or a list), ``ids``, ``id_prefix`` (one or a
    list), ``waiting_for`` (a message name the workflow waits for now:
    ``"*"`` waits for any message, ``"child:<id>"`` for that child),
    ``parent_id``, ``has_parent``, ``queue``, ``created_after`` /
    ``created_before`` and ``completed_after`` / ``completed_before``
    (datetimes or epoch seconds, exclusive), ``attributes`` (a mapping the
    workflow's attributes must match, by equality). ``order`` is ``"desc"``
    (newest first) or ``"asc"``; ``offset`` skips that many; at most
    ``limit`` handles (None: all). See docs/workflows.md.
    """
    rows = queries.page(order=order, offset=offset, limit=limit, **filters)
    return [WorkflowHandle(workflow_id, found) for workflow_id, found in rows]


async def afilter(**options: Any) -> list[WorkflowHandle]:
    """Async :func:`filter`."""
    return await sync_to_async(filter)(**options)


def count(**filters: Unpack[queries.Filters]) -> int:
    """Return how many workflows match the filters of :func:`filter`."""
    return queries.matching(**filters).count()


async def acount(**filters: Unpack[queries.Filters]) -> int:
    """Async :func:`count`."""
    return await sync_to_async(count)(**filters)


def delete(workflow_ids: Iterable[str], *, children: bool = False) -> int:
    """Delete finished workflows (and with ``children`` their descendants).

    Returns how many were deleted; ids no workflow has are skipped. All or
    nothing: one that has not finished raises ``WorkflowActive``
    (``workflow/active``) and nothing is deleted.
    """
    return control.delete(workflow_ids, children=children)


async def adelete(workflow_ids: Iterable[str], *, children: bool = False) -> int:
    """Async :func:`delete`."""
    return await sync_to_async(delete)(list(workflow_ids), children=children)
