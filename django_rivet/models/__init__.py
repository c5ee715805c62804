"""Storage of django-rivet, one module per concern.

- :mod:`.actors`: ``Actor`` (identity, CBOR state, version), ``ActorKV``,
  ``Connection`` and ``ActorEvent`` (the bounded event log);
- :mod:`.scheduling`: ``Schedule``, ``CronJob``, ``CronRun``,
  ``QueueMessage``, ``WorkflowQueue`` (admission's lock per workflow queue),
  ``ScheduledWorkflow`` (the ticks of ``@workflow(cron=...)``);
- :mod:`.workflows`: ``Workflow`` (the runtime's index and lease),
  ``WorkflowKV`` (the engine's private KV namespace), ``WorkflowMessage``,
  ``WorkflowStream`` and ``WorkflowStreamValue`` (``ctx.write_stream``);
- :mod:`.overview`: ``Overview``, a proxy giving the admin's overview page
  its place and permission.
- :mod:`.sql`: what differs per database, one dialect object per supported
  database (the hand-written statements of the hot paths, locks,
  capabilities); :mod:`.db`: the database those tables live in.

Runtime records are written by the runtime and shown read-only in the admin.
Values are CBOR bytes (see :mod:`django_rivet.encoding`); KV keys are raw
bytes compared bytewise (SQLite BLOB and PostgreSQL bytea both order by
memcmp, which the KV tests check with 0x00 and 0xFF keys). This package is
the storage layer: it imports only the foundation modules (``clock``,
``encoding``) and the pure workflow core's schema.
"""

from .actors import Actor, ActorEvent, ActorKV, Connection
from .base import now as _now  # referenced by the initial migration
from .overview import Overview
from .scheduling import (
    CronJob,
    CronKind,
    CronRun,
    CronRunResult,
    QueueMessage,
    QueueMessageStatus,
    Schedule,
    ScheduledWorkflow,
    ScheduleStatus,
    WorkflowQueue,
)
from .workflows import (
    TASK_WORKFLOW,
    WORKFLOW_ACTIVE,
    WORKFLOW_ADMITTED,
    WORKFLOW_FINISHED,
    DjangoTask,
    Workflow,
    WorkflowAttribute,
    WorkflowKV,
    WorkflowMessage,
    WorkflowMessageKey,
    WorkflowStatus,
    WorkflowStream,
    WorkflowStreamValue,
)

__all__ = [
    "TASK_WORKFLOW",
    "WORKFLOW_ACTIVE",
    "WORKFLOW_ADMITTED",
    "WORKFLOW_FINISHED",
    "Actor",
    "ActorEvent",
    "ActorKV",
    "Connection",
    "CronJob",
    "CronKind",
    "CronRun",
    "CronRunResult",
    "Overview",
    "QueueMessage",
    "QueueMessageStatus",
    "Schedule",
    "ScheduleStatus",
    "ScheduledWorkflow",
    "DjangoTask",
    "Workflow",
    "WorkflowAttribute",
    "WorkflowKV",
    "WorkflowMessage",
    "WorkflowMessageKey",
    "WorkflowQueue",
    "WorkflowStatus",
    "WorkflowStream",
    "WorkflowStreamValue",
    "_now",
]
