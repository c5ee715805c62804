"""Waiting for a workflow's end: what ``handle.result()`` polls and raises.

A handle polls the workflow's row (doubling its pause from 20 ms to 0.5 s)
until the workflow finished, then returns its output or raises what ended
it; a wait that runs out says why the workflow may not have finished (it
is queued, or no worker ever ran it).
"""

from __future__ import annotations

import time
from typing import Any

from ..conf import docs_url
from ..engine import WorkflowCancelled, WorkflowTimeout
from ..engine.errors import error_from_info
from ..models import WORKFLOW_FINISHED, Workflow
from . import operations, registry

__all__ = ["POLL_FIRST", "POLL_MAX", "finished", "outcome", "pause", "timed_out"]

POLL_FIRST = 0.02
POLL_MAX = 0.5

_CANCELLED_BECAUSE = {
    "timeout": " (its deadline passed)",
    "parent_cancelled": " (its parent was cancelled)",
}


def finished(workflow_id: str, name: str) -> tuple[str, Any, Any] | None:
    """Return (status, output, error) once the workflow finished, else None.

    The output of a completed workflow is its declared type (``name``'s
    return annotation).
    """
    status, reason = operations.status_and_reason(workflow_id)
    if status not in WORKFLOW_FINISHED:
        return None
    if status == "cancelled":
        # Cancelled at once; the engine may not have recorded it yet.
        return status, None, {"metadata": {"reason": reason or "cancelled"}}
    snapshot = operations.snapshot(workflow_id)
    output = snapshot.output
    if status == "completed":
        output = registry.typed_output(name, output)
    return status, output, snapshot.error


def pause(deadline: float | None, delay: float) -> float | None:
    """Return how long to wait before polling again; None past the deadline."""
    if deadline is None:
        return delay
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None
    return min(delay, remaining)


def outcome(workflow_id: str, status: str, output: Any, error: Any) -> Any:
    """Return the output of a completed workflow; raise what ended another."""
    if status == "completed":
        return output
    if status == "cancelled":
        metadata = (error or {}).get("metadata") or {}
        reason = str(metadata.get("reason") or "cancelled")
        cls = WorkflowTimeout if reason == "timeout" else WorkflowCancelled
        message = f"Workflow {workflow_id!r} was cancelled"
        raise cls(
            message + _CANCELLED_BECAUSE.get(reason, ""), metadata={"reason": reason}
        )
    raise error_from_info(error)


def timed_out(workflow_id: str, timeout: float | None) -> TimeoutError:
    """Return the time-out error, saying whether the workflow ever ran."""
    message = f"Workflow {workflow_id!r} did not finish within {timeout:g} seconds"
    row = (
        Workflow.objects.filter(pk=workflow_id)
        .values_list("status", "run_count")
        .first()
    )
    if row is not None and row[0] == "queued":
        return TimeoutError(
            f"{message}: it is still queued (its workflow queue's limits "
            "have not let it start yet)"
        )
    if row is not None and row[1] == 0:
        docs = docs_url("troubleshooting", "a-workflow-never-starts")
        return TimeoutError(
            f"{message}: it never started ({row[0]}), so no worker is "
            "running workflows. Start one: a Celery worker (`celery -A "
            "<project> worker`), `manage.py rivet_worker`, or in development "
            f"RIVET['EMBEDDED_WORKER'] = True. See {docs}"
        )
    if row is not None:
        return TimeoutError(f"{message} (it is {row[0]})")
    return TimeoutError(message)
