"""``handle.fork(from_step=...)``: a new workflow from another's history.

The fork is a new workflow of the same name whose history is a copy of the
original's up to the step named (its location, as ``history()`` shows it:
``charge``, ``batch/~3/fetch``): what was recorded before that step is
replayed, the step and everything after it run again with the code
deployed now. The values the original published up to there come along;
its inbox, replies and rows do not. The original is not touched. Children
the kept history still waits for wake the fork when they end (they keep
their parent). The copy, the cut and the new row commit together: no
worker sees a half-made fork.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

from .. import clock
from ..engine.ops import fork_from
from ..exceptions import WorkflowNotFound
from ..models import Workflow, WorkflowAttribute, WorkflowKV, db
from . import children, queues
from .children import start_fields
from .driver import DjangoDriver
from .execution import run_private
from .placement import Placement, placement
from .wakeups import schedule_wake, wake_fields

logger = logging.getLogger("django_rivet.workflows")

__all__ = ["fork"]


def fork(
    workflow_id: str,
    from_step: str,
    new_id: str | None = None,
    *,
    queue: str | None = None,
    version: str | None = None,
) -> tuple[str, str]:
    """Start a fork of ``workflow_id`` from the step at ``from_step``.

    Returns the fork's id and name. ``new_id`` (default: a random one) must
    be free; ``queue`` starts it through that workflow queue; ``version``
    is the application version it runs on (default: this process's, see
    :mod:`.versions`: a fork is a run of the code deployed now). Raises
    ``workflow/not_found`` for an unknown workflow and
    ``EntryNotFoundError`` when no step is at ``from_step``.
    """
    found = Workflow.objects.filter(pk=workflow_id).values_list("name").first()
    if found is None:
        raise WorkflowNotFound(f"No workflow has id {workflow_id!r}")
    name = found[0]
    where = placement(queue)
    new_id = uuid.uuid4().hex if new_id is None else str(new_id)
    now = clock.now_datetime()
    with db.atomic():
        placed = wake_fields(now) if where is None else where.fields()
        Workflow.objects.create(
            id=new_id, **{**start_fields(name, None, now, version), **placed}
        )
        _copy(workflow_id, new_id)
        driver = DjangoDriver(new_id, private_loop=True)
        kept = run_private(fork_from(new_id, driver, from_step))
        waits: list[str] = []
        for entry in kept:
            if entry.kind == "child" and entry.data.get("state") == "started":
                waits.append(str(entry.data["child_id"]))
            elif entry.kind == "wait_first" and entry.data.get("state") == "pending":
                waits += [str(i) for i in entry.data.get("children") or []]
        existing = Workflow.objects.filter(pk__in=waits).values_list("pk", flat=True)
        if waits:
            children.watch(new_id, list(existing))
        _schedule(new_id, where, now)
    logger.info(
        "workflow forked workflow=%s from=%s step=%s", new_id, workflow_id, from_step
    )
    return new_id, name


def _copy(source: str, target: str) -> None:
    """Copy the history and the attributes of ``source`` to ``target``."""
    WorkflowKV.objects.bulk_create(
        WorkflowKV(workflow_id=target, key=key, value=value)
        for key, value in WorkflowKV.objects.filter(workflow_id=source).values_list(
            "key", "value"
        )
    )
    WorkflowAttribute.objects.bulk_create(
        WorkflowAttribute(workflow_id=target, key=key, value=value, number=number)
        for key, value, number in WorkflowAttribute.objects.filter(
            workflow_id=source
        ).values_list("key", "value", "number")
    )


def _schedule(workflow_id: str, where: Placement | None, now: datetime) -> None:
    if where is None:
        schedule_wake(workflow_id, now)
    else:
        queues.admit_on_commit(where.queue)
