"""Durable workflows on Django: the one front door users import.

``from django_rivet import workflows`` (or ``from django_rivet.workflows
import ...``) gives everything a project writes and runs workflows with:

- writing them: ``workflow`` (the decorator), ``WorkflowContext``
  (``ctx``), the values ``ctx`` hands back (``Loop``,
  ``Message``, ``ChildOutcome``, ...) and the errors a workflow
  raises or catches (``CriticalError``, ``RollbackError``,
  ``ChildWorkflowError``, ...), all defined by the engine
  (``django_rivet.engine``, pure Python);
- running them: ``start``, ``get``, ``filter``, ``count``,
  their async twins and ``WorkflowHandle`` (see ``client``);
- scheduling them at run time: ``schedules`` (``schedules.create``,
  ``list``, ``pause``, ``trigger``, ``backfill``, ``apply``...).

The package is everything Django about workflows; the engine stays free of
Django:

- ``client``: the facade (handles, start, search);
- ``registry``: workflow name -> definition, discovered from apps;
- ``driver``: ``driver.DjangoDriver``, the engine driver on the
  ``WorkflowKV`` / ``WorkflowMessage`` tables, fenced by the run's lease
  (``fencing``), its blocking work run off the loop (``blocking``);
- ``leases``: claim, renew (heartbeat) and release a ``Workflow`` row;
- ``execution``: run a workflow until it pauses (the Celery task, the
  in-process worker, ``run_until_idle``);
- ``wakeups``: dispatch for due workflows and their sweep step;
- ``queues``: workflow queues (admission with flow control),
  ``scheduled``: the ticks of workflow schedules (``@workflow(cron=...)``
  and those created at run time, ``schedules``);
- ``operations``, ``control``: cancel, recover, replay, resume,
  send, wake (handles, admin); ``children`` (parents and children),
  ``published`` (events and replies), ``queries`` (search).

It may import dispatch, observability, storage and the foundation; never
the actor runtime (``ctx.workflows`` reaches it through the interfaces in
``django_rivet.actors.handles``), the scheduler, upkeep or the
transport, which build on it.

The client is imported on first use (PEP 562), as the actors' is: the
runtime's modules (the registry, which the checks import) stay cheap to
import, and a project's ``workflows.py`` imports ``workflow`` before
Django's models are ready.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .._lazy import lazy_from
from ..engine import (
    ChildOutcome,
    ChildStart,
    ChildWorkflowError,
    CriticalError,
    Failure,
    FirstFinished,
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
    InvalidQueueArguments,
    PartitionKeyRequired,
    UnknownWorkflowQueue,
    WorkflowActive,
    WorkflowCannotWait,
    WorkflowDeduplicated,
    WorkflowFinished,
    WorkflowIdConflict,
    WorkflowInboxFull,
    WorkflowNotFound,
    WorkflowQueueFull,
)

if TYPE_CHECKING:
    from . import schedules
    from .client import (
        MAX_ID_LENGTH,
        Send,
        WorkflowHandle,
        acount,
        adelete,
        afilter,
        aget,
        asend_many,
        astart,
        count,
        delete,
        filter,
        get,
        send_many,
        start,
    )

__all__ = [
    "MAX_ID_LENGTH",
    "ChildOutcome",
    "ChildStart",
    "ChildWorkflowError",
    "CriticalError",
    "Failure",
    "FirstFinished",
    "HistoryDivergedError",
    "HistoryEntry",
    "JoinError",
    "Loop",
    "LoopBreak",
    "LoopContinue",
    "Message",
    "MessageTimeoutError",
    "PartitionKeyRequired",
    "RaceError",
    "RecordedError",
    "ReplayDivergence",
    "RollbackContext",
    "RollbackError",
    "Send",
    "StepExhaustedError",
    "StepOutputError",
    "StepResult",
    "StepTimeoutError",
    "StorageLimitError",
    "InvalidQueueArguments",
    "UnknownWorkflowQueue",
    "WorkflowActive",
    "WorkflowCancelled",
    "WorkflowContext",
    "WorkflowCannotWait",
    "WorkflowDeduplicated",
    "WorkflowFinished",
    "WorkflowDefinition",
    "WorkflowError",
    "WorkflowHandle",
    "WorkflowIdConflict",
    "WorkflowInboxFull",
    "WorkflowNoReply",
    "WorkflowNotFound",
    "WorkflowQueueFull",
    "WorkflowRequestTimeout",
    "WorkflowSnapshot",
    "WorkflowTimeout",
    "acount",
    "adelete",
    "afilter",
    "aget",
    "asend_many",
    "astart",
    "count",
    "delete",
    "filter",
    "get",
    "schedules",
    "send_many",
    "start",
    "workflow",
]

# The names of __all__ not bound above: the client's, and the module
# ``schedules`` (imported on first use too).
_client_names = lazy_from("django_rivet.workflows.client", __all__, globals())


def __getattr__(name: str) -> object:
    if name == "schedules":
        return importlib.import_module(f"{__name__}.schedules")
    return _client_names(name)
