"""Start and drive durable workflows: ``from django_rivet import workflows``.

::

    h = workflows.start("order", {"sku": "A1"}, id="order-42")  # idempotent per id
    h = workflows.get("order-42")
    h.status                      # queued|pending|running|sleeping|completed|...
    h.send("approve", {"by": "ann"})
    h.result(timeout=60)          # the output, or raises the failure
    h.request("ask", {...}, timeout=30)   # send, and wait for ctx.reply's value
    h.get_event("progress")       # the latest ctx.set_event("progress", ...)
    for token in h.read_stream("tokens"): ...  # ctx.write_stream's values, live
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

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Unpack

from asgiref.sync import sync_to_async

from ..engine import WorkflowDefinition
from ..engine.values import seconds
from . import control, operations, queries, sends
from .debounces import debounce_seconds
from .instance import WorkflowHandle
from .sends import Send

# Each function, then its async twin, in the order they are defined.
__all__ = [
    "MAX_ID_LENGTH",
    "Send",
    "WorkflowHandle",
    "start",
    "astart",
    "get",
    "aget",
    "filter",
    "afilter",
    "count",
    "acount",
    "delete",
    "adelete",
    "send_many",
    "asend_many",
]

MAX_ID_LENGTH = operations.MAX_ID_LENGTH


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
    partition_key: str | None = None,
    run_after: datetime | float | timedelta | None = None,
    version: str | None = None,
    debounce: float | timedelta | None = None,
    debounce_max: float | timedelta | None = None,
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
    ``result()`` raises ``WorkflowTimeout``. On a partitioned queue,
    ``partition_key`` names the workflow's partition (required there,
    refused elsewhere: ``workflow/partition_key_required``, ``ValueError``).
    ``attributes`` (strings and
    integers by name, at most 32) are stored with a new workflow for
    :func:`filter` to find it by. ``run_after`` (an aware datetime, or
    seconds or a timedelta from now) delays the first run: the workflow is
    ``pending`` (``queued``, not counted by its queue) until then.

    ``version`` is the application version it runs on (default:
    ``RIVET["APP_VERSION"]``): only a worker of that version runs it.
    ``debounce`` (seconds or a timedelta, with ``queue`` and ``dedup_key``)
    starts it once no other start of that key came for that long, with the
    latest input; every start of one burst returns the same handle, and
    ``debounce_max`` bounds the wait from the burst's first start. See
    docs/workflows.md.
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
        partition_key=partition_key,
        run_after=operations.due_time(run_after),
        version=version,
        debounce=debounce_seconds(debounce, "debounce"),
        debounce_max=debounce_seconds(debounce_max, "debounce_max"),
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
    partition_key: str | None = None,
    run_after: datetime | float | timedelta | None = None,
    version: str | None = None,
    debounce: float | timedelta | None = None,
    debounce_max: float | timedelta | None = None,
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
        partition_key=partition_key,
        run_after=run_after,
        version=version,
        debounce=debounce,
        debounce_max=debounce_max,
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
    ``parent_id``, ``has_parent``, ``queue``, ``version`` (one or a list;
    ``""``: started without one), ``created_after`` /
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


def send_many(messages: Iterable[Send]) -> list[str]:
    """Send every :class:`Send` in one transaction; return the message ids.

    All or nothing: an unknown workflow (``workflow/not_found``), a full
    inbox or a body that cannot be stored sends none of them. Idempotency
    keys are honoured as by :meth:`WorkflowHandle.send` (two messages to
    one workflow with the same key in one call are a ``ValueError``).
    """
    return sends.send_many(messages)


async def asend_many(messages: Iterable[Send]) -> list[str]:
    """Async :func:`send_many`."""
    return await sync_to_async(send_many)(list(messages))
