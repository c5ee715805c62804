"""Durable workflows on Django: the one front door users import.

``from django_rivet import workflows`` (or ``from django_rivet.workflows
import ...``) gives everything a project writes and runs workflows with:

- writing them: :func:`workflow` (the decorator), :class:`WorkflowContext`
  (``ctx``), the values ``ctx`` hands back (:class:`Loop`,
  :class:`Message`, :class:`ChildOutcome`, ...) and the errors a workflow
  raises or catches (:class:`CriticalError`, :class:`RollbackError`,
  :class:`ChildWorkflowError`, ...), all defined by the engine
  (:mod:`django_rivet.engine`, pure Python);
- running them: :func:`start`, :func:`get`, :func:`filter`, :func:`count`,
  their async twins and :class:`WorkflowHandle` (see :mod:`.client`).

The package is everything Django about workflows; the engine stays free of
Django:

- :mod:`.client`: the facade (handles, start, search);
- :mod:`.registry`: workflow name -> definition, discovered from apps;
- :mod:`.driver`: :class:`~.driver.DjangoDriver`, the engine driver on the
  ``WorkflowKV`` / ``WorkflowMessage`` tables, fenced by the run's lease;
- :mod:`.leases`: claim, renew (heartbeat) and release a ``Workflow`` row;
- :mod:`.execution`: run a workflow until it pauses (the Celery task, the
  in-process worker, ``run_until_idle``);
- :mod:`.wakeups`: dispatch for due workflows and their sweep step;
- :mod:`.queues`: workflow queues (admission with flow control), and
  :mod:`.scheduled`: ``@workflow(cron=...)`` ticks;
- :mod:`.operations`, :mod:`.control`: cancel, recover, replay, resume,
  send, wake (handles, admin); :mod:`.children` (parents and children),
  :mod:`.published` (events and replies), :mod:`.queries` (search).

It may import dispatch, observability, storage and the foundation; never
the actor runtime (``ctx.workflows`` reaches it through the interfaces in
:mod:`django_rivet.actors.services`), the scheduler, upkeep or the
transport, which build on it.

The client is imported on first use (PEP 562), as the actors' is: the
runtime's modules (the registry, which the checks import) stay cheap to
import, and a project's ``workflows.py`` imports :func:`workflow` before
Django's models are ready.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..engine import (
    ChildOutcome,
    ChildStart,
    ChildWorkflowError,
    CriticalError,
    Failure,
    HistoryDivergedError,
    HistoryEntry,
    JoinError,
    Loop,
    LoopBreak,
    LoopContinue,
    Message,
    MessageTimeoutError,
    RaceError,
    RecordedError,
    ReplayDivergence,
    RollbackContext,
    RollbackError,
    StepExhaustedError,
    StepOutputError,
    StepResult,
    StepTimeoutError,
    StorageLimitError,
    WorkflowCancelled,
    WorkflowContext,
    WorkflowDefinition,
    WorkflowError,
    WorkflowNoReply,
    WorkflowRequestTimeout,
    WorkflowSnapshot,
    WorkflowTimeout,
    workflow,
)
from ..exceptions import (
    UnknownWorkflowQueue,
    WorkflowDeduplicated,
    WorkflowInboxFull,
    WorkflowNotFound,
)

if TYPE_CHECKING:
    from .client import (
        MAX_ID_LENGTH,
        WorkflowHandle,
        acount,
        afilter,
        aget,
        astart,
        count,
        filter,
        get,
        start,
    )

_CLIENT = {
    "MAX_ID_LENGTH",
    "WorkflowHandle",
    "acount",
    "afilter",
    "aget",
    "astart",
    "count",
    "filter",
    "get",
    "start",
}

__all__ = [
    "MAX_ID_LENGTH",
    "ChildOutcome",
    "ChildStart",
    "ChildWorkflowError",
    "CriticalError",
    "Failure",
    "HistoryDivergedError",
    "HistoryEntry",
    "JoinError",
    "Loop",
    "LoopBreak",
    "LoopContinue",
    "Message",
    "MessageTimeoutError",
    "RaceError",
    "RecordedError",
    "ReplayDivergence",
    "RollbackContext",
    "RollbackError",
    "StepExhaustedError",
    "StepOutputError",
    "StepResult",
    "StepTimeoutError",
    "StorageLimitError",
    "UnknownWorkflowQueue",
    "WorkflowCancelled",
    "WorkflowContext",
    "WorkflowDeduplicated",
    "WorkflowDefinition",
    "WorkflowError",
    "WorkflowHandle",
    "WorkflowInboxFull",
    "WorkflowNoReply",
    "WorkflowNotFound",
    "WorkflowRequestTimeout",
    "WorkflowSnapshot",
    "WorkflowTimeout",
    "acount",
    "afilter",
    "aget",
    "astart",
    "count",
    "filter",
    "get",
    "start",
    "workflow",
]


def __getattr__(name: str) -> Any:
    if name not in _CLIENT:
        raise AttributeError(
            f"module 'django_rivet.workflows' has no attribute {name!r}"
        )
    from . import client

    value = getattr(client, name)
    globals()[name] = value
    return value
