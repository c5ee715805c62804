"""More operations on workflows outside their runs: resume, delete, the family, checks.

Like :mod:`.operations`, each one that writes history takes the workflow's
lease first and runs the engine's operation on a private loop.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.db.models import F, Q

from .. import clock
from ..engine import ReplayDivergence, check_replay, resume_workflow
from ..engine.ops import read_workflow
from ..exceptions import WorkflowActive, WorkflowNotFound
from ..models import WORKFLOW_FINISHED, Workflow, WorkflowStatus, db, sql
from . import registry
from .driver import DjangoDriver
from .execution import release, run_if_idle, run_private
from .wakeups import schedule_wake, wake_fields

logger = logging.getLogger("django_rivet.workflows")

__all__ = ["check", "delete", "parent_of", "resume"]


def parent_of(workflow_id: str) -> str | None:
    """Return the id of the workflow's parent, None for a top-level one."""
    found = Workflow.objects.filter(pk=workflow_id).values_list("parent_id").first()
    if found is None:
        raise WorkflowNotFound(f"No workflow has id {workflow_id!r}")
    return found[0] or None


async def _resume(workflow_id: str, driver: DjangoDriver) -> bool:
    state = (await read_workflow(driver)).state
    if state in ("cancelled", "rolling_back"):
        return await resume_workflow(workflow_id, driver)
    # Its cancel was never carried out (no worker got to it yet): withdrawing
    # it is all a resume does; its history goes on as it stands.
    return True


def resume(workflow_id: str) -> bool:
    """Let a cancelled workflow go on from where it stopped; start a queued one.

    A queued workflow starts at once, outside its queue's limits (as DBOS's
    resume does): it counts against its queue's concurrency until it
    finishes. A cancelled one goes on from its history. Returns False
    (changing nothing) otherwise: unless it is cancelled, no rollback
    handler ran for it, and nobody holds it (a worker still carrying its
    cancel out does). Its deadline is dropped (it passed, if that is why it
    was cancelled); its children stay as they are.
    """
    if _start_queued(workflow_id):
        return True
    held = run_if_idle(workflow_id, WorkflowStatus.CANCELLED, _resume)
    if held is None:
        return False
    lease, _ = held
    release(
        lease,
        status=WorkflowStatus.SLEEPING,
        wake_at=clock.now_datetime(),  # due now
        waiting_for=[],
        finished_at=None,
        cancel_requested=False,
        cancel_reason="",
        deadline_at=None,
        retry_count=0,
        last_error="",
    )
    logger.info("workflow resumed workflow=%s", workflow_id)
    return True


def _start_queued(workflow_id: str) -> bool:
    """Start a queued workflow now, whatever its queue's limits say."""
    now = clock.now_datetime()
    with db.atomic():
        started = Workflow.objects.filter(
            pk=workflow_id, status=WorkflowStatus.QUEUED
        ).update(
            status=WorkflowStatus.PENDING,
            wake_at=now,
            started_at=now,
            updated_at=now,
            **wake_fields(now),
        )
        if started:
            schedule_wake(workflow_id, now)
    if started:
        logger.info("workflow resumed from its queue workflow=%s", workflow_id)
    return bool(started)


def delete(workflow_ids: Iterable[str], *, children: bool = False) -> int:
    """Delete finished workflows and every row they own; return how many.

    Their history, inbox and attributes go with them. Ids no workflow has
    are skipped (a second delete changes nothing). ``children`` deletes
    their descendants too. All or nothing: if one of them has not finished
    -- or its cancel is still being carried out, or an operation holds it
    -- it raises ``workflow/active`` and deletes nothing.
    """
    wanted = list(dict.fromkeys(str(workflow_id) for workflow_id in workflow_ids))
    with db.atomic():
        if children:
            wanted += _descendants(wanted)
        rows = Workflow.objects.filter(pk__in=wanted)
        if sql.dialect(db.connection()).locks_by_writing_first:
            # The write lock first (SQLite): what the check reads stays so.
            rows.update(updated_at=F("updated_at"))
        else:
            list(rows.select_for_update().values_list("pk", flat=True))
        busy = rows.exclude(
            Q(status__in=WORKFLOW_FINISHED)
            & Q(lease_token="")
            & Q(cancel_requested=False)
        )
        found = busy.values_list("pk", "status").first()
        if found is not None:
            raise WorkflowActive(
                f"Workflow {found[0]!r} has not finished ({found[1]}): cancel it "
                "first, or wait until it is done",
                metadata={"workflow_id": found[0], "status": found[1]},
            )
        _, deleted = rows.delete()
    count = deleted.get(Workflow._meta.label, 0)
    if count:
        logger.info("workflows deleted count=%s children=%s", count, children)
    return count


def _descendants(workflow_ids: list[str]) -> list[str]:
    """Return the children of ``workflow_ids``, theirs, and so on."""
    found: list[str] = []
    parents = workflow_ids
    while parents:
        parents = list(
            Workflow.objects.filter(parent_id__in=parents).values_list("pk", flat=True)
        )
        parents = [pk for pk in parents if pk not in found]
        found += parents
    return found


def check(workflow_id: str) -> ReplayDivergence | None:
    """Replay the workflow's history against the deployed code, running nothing.

    Returns None when it replays cleanly, else where and why it diverges
    (see :func:`~django_rivet.engine.check_replay`). A workflow whose
    name no deployed definition has cannot run at all: that is reported
    too, with the code ``not_found``.
    """
    name = Workflow.objects.filter(pk=workflow_id).values_list("name").first()
    if name is None:
        raise WorkflowNotFound(f"No workflow has id {workflow_id!r}")
    try:
        definition = registry.get(name[0])
    except WorkflowNotFound as missing:
        return ReplayDivergence(workflow_id, "", missing.message, "not_found")
    driver = DjangoDriver(workflow_id, private_loop=True)
    return run_private(check_replay(workflow_id, definition.fn, driver))
