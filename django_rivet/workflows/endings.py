"""What a workflow's end tells code outside it: ``workflow_finished``.

The signal :data:`django_rivet.signals.workflow_finished` is sent once per
end -- ``completed``, ``failed`` or ``cancelled`` -- after the transaction
that recorded the end commits, in the process that recorded it: the worker
whose run finished, or the caller of ``cancel()`` (a cancel ends a workflow
at once; the rollbacks that follow send nothing more). A workflow that runs
again (recovered, resumed, replayed) and ends again sends it again.
Receivers that raise are logged, never raised into the runtime.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from ..engine.errors import cancellation, error_info
from ..exceptions import WorkflowNotFound
from ..models import db
from ..signals import workflow_finished
from . import registry

logger = logging.getLogger("django_rivet.workflows")

__all__ = ["cancel_error", "failure", "finished_on_commit"]


def cancel_error(reason: str) -> dict[str, Any]:
    """Return the error a cancel for ``reason`` reports (as the engine records it)."""
    return error_info(cancellation(reason))


def failure(error: BaseException | None) -> dict[str, Any] | None:
    """Return the reportable ``{name, message, ...}`` of a run's failure."""
    return None if error is None else error_info(error)


def finished_on_commit(
    workflow_id: str, name: str, status: str, error: dict[str, Any] | None
) -> None:
    """Send ``workflow_finished`` once the current transaction commits."""
    db.on_commit(
        functools.partial(_send, workflow_id, name, status, error), robust=True
    )


def _send(
    workflow_id: str, name: str, status: str, error: dict[str, Any] | None
) -> None:
    try:
        sender: Any = registry.get(name)
    except WorkflowNotFound:
        sender = None  # a name this process's code no longer has
    responses = workflow_finished.send_robust(
        sender=sender, workflow_id=workflow_id, name=name, status=status, error=error
    )
    for receiver, response in responses:
        if isinstance(response, Exception):
            logger.error(
                "workflow_finished receiver %r raised workflow=%s",
                receiver,
                workflow_id,
                exc_info=response,
            )
