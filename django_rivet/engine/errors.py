"""Exceptions of the workflow engine.

Two families live here. Failures (:class:`WorkflowError` and subclasses) are
ordinary exceptions with a ``group``/``code`` pair, like every django-rivet
error. Interrupts (:class:`WorkflowInterrupt` and subclasses) are control-flow
signals that pause a run (a sleep, a message wait, a retry backoff, an
eviction); they derive from :class:`BaseException` so that a workflow's
``except Exception`` cannot swallow them by accident.
"""

from __future__ import annotations

import traceback as _traceback
from collections.abc import Iterable, Mapping
from typing import Any

from django_rivet.exceptions import RivetError

__all__ = [
    "CANCEL_REASONS",
    "MAX_TRACEBACK_CHARS",
    "ChildWorkflowError",
    "CriticalError",
    "EntryInProgressError",
    "EntryNotFoundError",
    "EvictedError",
    "HistoryDivergedError",
    "KNOWN_ERRORS",
    "JoinError",
    "MessageTimeoutError",
    "MessageWaitError",
    "RaceError",
    "RecordedError",
    "ReplayRefusedError",
    "RollbackCheckpointError",
    "RollbackError",
    "SchemaError",
    "SleepError",
    "StepExhaustedError",
    "StepFailedError",
    "StepOutputError",
    "StepTimeoutError",
    "StorageError",
    "StorageLimitError",
    "WorkflowCancelled",
    "WorkflowError",
    "WorkflowInterrupt",
    "WorkflowNoReply",
    "WorkflowRequestTimeout",
    "WorkflowTimeout",
    "cancellation",
    "diverged",
    "error_from_info",
    "error_info",
    "format_traceback",
    "mark_reported",
    "was_reported",
]


class WorkflowError(RivetError):
    """Base of every workflow failure."""

    group = "workflow"
    code = "error"
    default_message = "Workflow error"


class CriticalError(WorkflowError):
    """Raise in a step to fail it at once, without retries."""

    code = "critical"
    default_message = "Critical step failure"


class RollbackError(WorkflowError):
    """Raise in a step to fail it without retries and roll the workflow back."""

    code = "rollback"
    default_message = "Rollback requested"


class StepTimeoutError(CriticalError):
    """A step ran longer than its ``timeout``."""

    code = "step_timeout"
    default_message = "Step timed out"


class StepOutputError(CriticalError):
    """A step returned a value that cannot be stored (not CBOR or too large)."""

    code = "step_output"
    default_message = "Step output cannot be stored"


class StepExhaustedError(WorkflowError):
    """A step failed on every attempt its ``max_retries`` allowed."""

    code = "step_exhausted"
    default_message = "Step retries exhausted"


class HistoryDivergedError(WorkflowError):
    """The workflow code no longer matches its recorded history.

    ``location`` is where it was found (``sum/~3/fetch``), when known.
    """

    code = "history_diverged"
    default_message = "Workflow history diverged"

    @property
    def location(self) -> str | None:
        """Return the location the divergence was found at, if known."""
        if isinstance(self.metadata, Mapping):
            found = self.metadata.get("location")
            return None if found is None else str(found)
        return None


# Both ways a run stops matching its history; which one it is, only the
# project knows, so every divergence names both.
DIVERGENCE_CAUSES = (
    "Either the workflow's code changed since this history was recorded "
    "(retire old entries with ctx.removed(), branch with ctx.get_version()), "
    "or the workflow is not deterministic: the names, order and branches of "
    "its entries must follow only from its input and recorded results "
    "(ctx.step), never from the clock, random numbers or data read outside "
    "a step."
)


def diverged(
    message: str, location: str, *, causes: bool = True
) -> HistoryDivergedError:
    """Build a :class:`HistoryDivergedError` at ``location``, naming both causes.

    ``causes=False`` for a mistake that is one whatever the history holds (a
    duplicate entry name).
    """
    text = f"{message}. {DIVERGENCE_CAUSES}" if causes else message
    return HistoryDivergedError(text, metadata={"location": location})


class EntryInProgressError(WorkflowError):
    """A context started an entry while another was still in flight."""

    code = "entry_in_progress"
    default_message = (
        "Another entry is still in flight in this context: await each ctx call "
        "before the next one, and use ctx.join for parallel work"
    )


class RollbackCheckpointError(WorkflowError):
    """A step with a ``rollback`` handler ran before any rollback checkpoint."""

    code = "rollback_checkpoint"
    default_message = (
        "A step with a rollback handler needs ctx.rollback_checkpoint() before it"
    )


class MessageTimeoutError(WorkflowError):
    """``messages.next`` reached its timeout without a message."""

    code = "message_timeout"
    default_message = "No message arrived before the timeout"


class JoinError(WorkflowError):
    """One or more branches of a join failed; ``errors`` maps branch to error."""

    code = "join_failed"

    def __init__(self, name: str, errors: Mapping[str, BaseException]) -> None:
        self.errors = dict(errors)
        detail = "; ".join(f"{key}: {value}" for key, value in self.errors.items())
        super().__init__(f'Join "{name}" failed: {detail}')


class RaceError(WorkflowError):
    """Every branch of a race failed; ``errors`` maps branch to error."""

    code = "race_failed"

    def __init__(self, name: str, errors: Mapping[str, BaseException]) -> None:
        self.errors = dict(errors)
        detail = "; ".join(f"{key}: {value}" for key, value in self.errors.items())
        super().__init__(f'Every branch of race "{name}" failed: {detail}')


class ChildWorkflowError(WorkflowError):
    """A child workflow awaited with ``ctx.child`` failed or was cancelled.

    ``child_id`` is the child's id, ``state`` its end (``failed`` or
    ``cancelled``) and ``child_error`` its stored error map
    (``{"name", "message", ...}``).
    """

    code = "child_failed"
    default_message = "Child workflow failed"

    @property
    def child_id(self) -> str | None:
        """Return the id of the child workflow."""
        found = self._meta("child_id")
        return None if found is None else str(found)

    @property
    def state(self) -> str | None:
        """Return how the child ended: ``failed`` or ``cancelled``."""
        found = self._meta("state")
        return None if found is None else str(found)

    @property
    def child_error(self) -> dict[str, Any] | None:
        """Return the child's stored error map."""
        found = self._meta("error")
        return dict(found) if isinstance(found, Mapping) else None

    def _meta(self, key: str) -> Any:
        if isinstance(self.metadata, Mapping):
            return self.metadata.get(key)
        return None


class WorkflowCancelled(WorkflowError):
    """The workflow was cancelled (``reason`` says why: ``cancelled``,
    ``parent_cancelled`` or ``timeout``)."""

    code = "cancelled"
    default_message = "Workflow cancelled"

    @property
    def reason(self) -> str:
        """Return why the workflow was cancelled."""
        if isinstance(self.metadata, Mapping) and self.metadata.get("reason"):
            return str(self.metadata["reason"])
        return "timeout" if isinstance(self, WorkflowTimeout) else "cancelled"


class WorkflowTimeout(WorkflowCancelled):
    """The workflow's deadline passed: it was cancelled with reason ``timeout``."""

    code = "timeout"
    default_message = "Workflow deadline passed"


# Why a workflow may be cancelled: the error its cancellation records.
CANCEL_REASONS = ("cancelled", "parent_cancelled", "timeout")


def cancellation(reason: str) -> WorkflowCancelled:
    """Return the error a cancellation for ``reason`` records."""
    if reason not in CANCEL_REASONS:
        raise ValueError(f"Unknown cancel reason {reason!r}")
    if reason == "timeout":
        return WorkflowTimeout(
            "The workflow's deadline passed", metadata={"reason": reason}
        )
    if reason == "parent_cancelled":
        return WorkflowCancelled(
            "The parent workflow was cancelled", metadata={"reason": reason}
        )
    return WorkflowCancelled("The workflow was cancelled", metadata={"reason": reason})


class WorkflowRequestTimeout(WorkflowError, TimeoutError):
    """``handle.request`` got no reply within its timeout."""

    code = "request_timeout"
    default_message = "The workflow did not reply in time"


class WorkflowNoReply(WorkflowError):
    """``handle.request``: the workflow ended without replying."""

    code = "no_reply"
    default_message = "The workflow ended without replying"


class StorageLimitError(CriticalError):
    """A value or a flush is larger than workflow storage takes.

    Raised before anything is written, naming what was too big and the
    limit. It is a :class:`CriticalError`: a step whose output (or whose
    writes, refused by an atomic driver) is over the limit fails at once,
    without retries, and an oversized loop state, join or race result,
    workflow input or output fails the workflow.
    """

    code = "storage_limit"
    default_message = "Workflow storage limit exceeded"


class StorageError(WorkflowError):
    """The driver failed during a flush; nothing was acknowledged, retry later.

    The runner never records this as the workflow's failure: it propagates out
    of ``run_workflow`` so the host retries the run (the workflow resumes by
    replay from what was flushed before).
    """

    code = "storage_unavailable"
    default_message = "Workflow storage is unavailable"


class SchemaError(WorkflowError):
    """Stored bytes do not decode as a known schema version."""

    code = "schema"
    default_message = "Undecodable workflow record"


class EntryNotFoundError(WorkflowError):
    """No history entry has the given id."""

    code = "entry_not_found"
    default_message = "Workflow history entry not found"


class ReplayRefusedError(WorkflowError):
    """``replay_from`` cannot run now (wrong target, or a kept step is running)."""

    code = "replay_refused"
    default_message = "Cannot replay the workflow from this entry"


class RecordedError(WorkflowError):
    """A failure read back from history whose original class is not known here."""

    code = "recorded"

    def __init__(self, name: str, message: str) -> None:
        self.original_name = name
        super().__init__(message)


# --- Interrupts -----------------------------------------------------------------


class WorkflowInterrupt(BaseException):  # noqa: N818 - a signal, not an error
    """Pause the run: wake at ``deadline`` (epoch seconds) or on ``names``."""

    def __init__(
        self, deadline: float | None = None, names: Iterable[str] = ()
    ) -> None:
        self.deadline = deadline
        self.names = list(dict.fromkeys(names))
        super().__init__(deadline, self.names)


class SleepError(WorkflowInterrupt):
    """The workflow sleeps until ``deadline``."""


class MessageWaitError(WorkflowInterrupt):
    """The workflow waits for a message in ``names`` (or until ``deadline``)."""


class StepFailedError(WorkflowInterrupt):
    """A step attempt failed; the run pauses until its retry time."""

    def __init__(self, step: str, attempt: int, retry_at: float, cause: Any) -> None:
        self.step = step
        self.attempt = attempt
        self.cause = cause
        super().__init__(retry_at)


class EvictedError(WorkflowInterrupt):
    """The run was asked to stop (eviction or cancellation)."""


# --- Recording errors in history ----------------------------------------------

KNOWN_ERRORS: dict[str, type[WorkflowError]] = {
    cls.__name__: cls
    for cls in (
        WorkflowError,
        CriticalError,
        RollbackError,
        StepTimeoutError,
        StepOutputError,
        StepExhaustedError,
        HistoryDivergedError,
        EntryInProgressError,
        RollbackCheckpointError,
        MessageTimeoutError,
        StorageLimitError,
        ChildWorkflowError,
        WorkflowCancelled,
        WorkflowTimeout,
    )
}


# Error messages are stored in history: a huge one (an exception carrying a
# whole response body) must not make the failure itself unstorable.
MAX_ERROR_MESSAGE_CHARS = 8192
# A failed step attempt keeps this much of its traceback (the end: the frames
# nearest to the raise are the ones that explain it).
MAX_TRACEBACK_CHARS = 16 * 1024


def error_info(
    error: BaseException, *, traceback: bool = False, **extra: Any
) -> dict[str, Any]:
    """Return the storable description ``{name, message, ...}`` of ``error``.

    Messages longer than :data:`MAX_ERROR_MESSAGE_CHARS` are cut there. A
    workflow error's ``metadata`` (a map: a child's id and error, a
    divergence's location) is kept when it can be stored. ``traceback=True``
    adds the formatted traceback, its last :data:`MAX_TRACEBACK_CHARS`.
    """
    if isinstance(error, RecordedError):
        name = error.original_name
    else:
        name = type(error).__name__
    message = error.message if isinstance(error, RivetError) else str(error)
    if len(message) > MAX_ERROR_MESSAGE_CHARS:
        message = message[:MAX_ERROR_MESSAGE_CHARS] + " [truncated]"
    info: dict[str, Any] = {"name": name, "message": message}
    metadata = getattr(error, "metadata", None)
    if isinstance(error, WorkflowError) and isinstance(metadata, Mapping):
        if _storable(metadata):
            info["metadata"] = dict(metadata)
    if traceback:
        info["traceback"] = format_traceback(error)
    info.update(extra)
    return info


def format_traceback(error: BaseException) -> str:
    """Return ``error``'s traceback as text, its last 16 KiB at most."""
    text = "".join(_traceback.format_exception(error))
    if len(text) > MAX_TRACEBACK_CHARS:
        text = "[truncated]\n" + text[-MAX_TRACEBACK_CHARS:]
    return text


def _storable(value: Any, depth: int = 0) -> bool:
    """Tell whether ``value`` is plain data a history record can hold."""
    if depth > 16:
        return False
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return True
    if isinstance(value, list | tuple):
        return all(_storable(item, depth + 1) for item in value)
    if isinstance(value, Mapping):
        return all(
            isinstance(key, str) and _storable(item, depth + 1)
            for key, item in value.items()
        )
    return False


_REPORTED = "_rivet_reported"


def mark_reported(error: BaseException) -> BaseException:
    """Note that ``on_error`` already heard of ``error`` (a step's own event)."""
    setattr(error, _REPORTED, True)
    return error


def was_reported(error: BaseException) -> bool:
    """Tell whether :func:`mark_reported` was called on ``error``."""
    return bool(getattr(error, _REPORTED, False))


def error_from_info(info: Mapping[str, Any] | None) -> WorkflowError:
    """Rebuild an exception from :func:`error_info` output."""
    if not info:
        return WorkflowError("Workflow failed")
    name = str(info.get("name", "WorkflowError"))
    message = str(info.get("message", ""))
    metadata = info.get("metadata")
    cls = KNOWN_ERRORS.get(name)
    if cls is not None:
        return cls(message, metadata=metadata)
    error = RecordedError(name, message)
    error.metadata = metadata
    return error
