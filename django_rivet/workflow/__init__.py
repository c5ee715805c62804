"""The durable workflow engine core of django-rivet (pure Python, no Django).

Write workflows against :class:`WorkflowContext`; run them with
:func:`run_workflow` on any :class:`EngineDriver` (``InMemoryDriver`` for
tests, the Django driver in production). See SPEC section 5 and
``docs/storage-format.md``.
"""

from __future__ import annotations

from .context import WorkflowContext
from .driver import EngineDriver, InMemoryDriver
from .errors import (
    CriticalError,
    EntryInProgressError,
    EntryNotFoundError,
    EvictedError,
    HistoryDivergedError,
    JoinError,
    MessageTimeoutError,
    MessageWaitError,
    RaceError,
    RecordedError,
    ReplayRefusedError,
    RollbackCheckpointError,
    RollbackError,
    SchemaError,
    SleepError,
    StepExhaustedError,
    StepFailedError,
    StepOutputError,
    StepTimeoutError,
    StorageError,
    StorageLimitError,
    WorkflowError,
    WorkflowInterrupt,
)
from .ops import (
    WorkflowSnapshot,
    cancel_workflow,
    read_history,
    read_workflow,
    recover_workflow,
    replay_from,
    wake_workflow,
)
from .runner import WorkflowRun, run_workflow, start_workflow
from .schema import SCHEMA_VERSION, HistoryEntry, decode_history
from .storage import (
    MAX_CONCURRENT_DELETES,
    MAX_KV_BATCH_ENTRIES,
    MAX_KV_BATCH_PAYLOAD_BYTES,
)
from .values import (
    Failure,
    Loop,
    LoopBreak,
    LoopContinue,
    Message,
    RollbackContext,
    RollbackErrorEvent,
    StepErrorEvent,
    StepResult,
    WorkflowDefinition,
    WorkflowErrorEvent,
    WorkflowOutcome,
    workflow,
)

__all__ = [
    "MAX_CONCURRENT_DELETES",
    "MAX_KV_BATCH_ENTRIES",
    "MAX_KV_BATCH_PAYLOAD_BYTES",
    "SCHEMA_VERSION",
    "CriticalError",
    "EngineDriver",
    "EntryInProgressError",
    "EntryNotFoundError",
    "EvictedError",
    "Failure",
    "HistoryDivergedError",
    "HistoryEntry",
    "InMemoryDriver",
    "JoinError",
    "Loop",
    "LoopBreak",
    "LoopContinue",
    "Message",
    "MessageTimeoutError",
    "MessageWaitError",
    "RaceError",
    "RecordedError",
    "ReplayRefusedError",
    "RollbackCheckpointError",
    "RollbackContext",
    "RollbackError",
    "RollbackErrorEvent",
    "SchemaError",
    "SleepError",
    "StepErrorEvent",
    "StepExhaustedError",
    "StepFailedError",
    "StepOutputError",
    "StepResult",
    "StepTimeoutError",
    "StorageError",
    "StorageLimitError",
    "WorkflowContext",
    "WorkflowDefinition",
    "WorkflowError",
    "WorkflowErrorEvent",
    "WorkflowInterrupt",
    "WorkflowOutcome",
    "WorkflowRun",
    "WorkflowSnapshot",
    "cancel_workflow",
    "decode_history",
    "read_history",
    "read_workflow",
    "recover_workflow",
    "replay_from",
    "run_workflow",
    "start_workflow",
    "wake_workflow",
    "workflow",
]
