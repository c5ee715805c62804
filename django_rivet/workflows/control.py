"""More operations on workflows outside their runs: resume, the family, checks.

Like :mod:`.operations`, each one that writes history takes the workflow's
lease first and runs the engine's operation on a private loop.
"""

from __future__ import annotations

import logging

from .. import clock
from ..engine import ReplayDivergence, check_replay, resume_workflow
from ..engine.ops import read_workflow
from ..exceptions import WorkflowNotFound
from ..models import Workflow, WorkflowStatus
from . import registry
from .driver import DjangoDriver
from .execution import release, run_if_idle, run_private

logger = logging.getLogger("django_rivet.workflows")

__all__ = ["check", "parent_of", "resume"]


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
    """Let a cancelled workflow go on from where it stopped.

    Returns False (changing nothing) unless it is cancelled, no rollback
    handler ran for it, and nobody holds it (a worker still carrying its
    cancel out does). Its deadline is dropped (it passed, if that is why it
    was cancelled); its children stay as they are.
    """
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
