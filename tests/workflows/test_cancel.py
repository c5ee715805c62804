"""A cancel stops a running workflow before its next step (issue 44).

The workflow (``blockedBetweenSteps``) runs on a worker thread and waits in
its own code between two steps, as DBOS's cancel tests do; the test cancels
it there, then lets it go on. Once ``cancel()`` returned: its status is
``cancelled``, its queue slot is free, no further step function runs and
no child starts; the worker then runs its rollback handlers. The tests
named after DBOS Transact's (tests/test_workflow_management.py,
tests/test_queue.py) are translations of them. The same through a real
Celery worker is in ``test_celery.py``.
"""

from __future__ import annotations

import contextlib
import pathlib
import threading
from collections.abc import Iterator

import pytest
from django.db import connections
from django.test import override_settings

from django_rivet import workflows
from django_rivet.engine import WorkflowCancelled
from django_rivet.models import Workflow, WorkflowStatus
from django_rivet.testing import register_temporarily, run_due, run_until_idle
from django_rivet.workflows import execution, workflow
from tests.support.polling import wait_for
from tests.testapp.models import StepRow

# pg: the PostgreSQL leg runs this module (the lease fence and the cancel check
# in each database's SQL, a worker thread beside the test's connection).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

settings = override_settings(RIVET={"WORKFLOW_QUEUES": {"single": {"concurrency": 1}}})


def steps(workflow_id: str) -> list[str]:
    """The step functions and rollback handlers that ran, in order."""
    rows = StepRow.objects.filter(workflow_id=workflow_id).order_by("pk")
    return list(rows.values_list("step", flat=True))


class Blocked:
    """``blockedBetweenSteps`` held by a worker thread, waiting in its own code."""

    def __init__(self, tmp_path: pathlib.Path, workflow_id: str, **input: object):
        self.entered = tmp_path / f"{workflow_id}.entered"
        self.gate = tmp_path / f"{workflow_id}.gate"
        self.input = {"entered": str(self.entered), "gate": str(self.gate), **input}
        self.workflow_id = workflow_id
        self.results: list[str | None] = []
        self.thread = threading.Thread(target=self._work)

    def _work(self) -> None:
        try:
            self.results.append(execution.run(self.workflow_id))
        finally:
            connections.close_all()

    def start(self, **options: object) -> workflows.WorkflowHandle:
        """Start the workflow and its worker; return once it waits."""
        handle = workflows.start(
            "blockedBetweenSteps", self.input, id=self.workflow_id, **options
        )
        if options.get("queue") is not None:
            assert handle.status == "pending"  # admitted by its start
        self.thread.start()
        wait_for(self.entered.exists, what="the wait between the steps")
        return handle

    def go_on(self) -> list[str | None]:
        """Let the workflow's code go on; return what the worker's run returned."""
        self.gate.touch()
        self.thread.join(60)
        assert not self.thread.is_alive()
        return self.results


@pytest.fixture
def blocked(tmp_path: pathlib.Path) -> Iterator[type[Blocked]]:
    made: list[Blocked] = []

    def make(workflow_id: str, **input: object) -> Blocked:
        run = Blocked(tmp_path, workflow_id, **input)
        made.append(run)
        return run

    yield make  # type: ignore[misc]
    for run in made:  # never leave a worker thread waiting
        run.gate.touch()
        if run.thread.ident is not None:
            run.thread.join(60)


@pytest.mark.parametrize("then", ["step", "transaction"])
def test_once_cancel_returns_no_further_step_runs_and_the_rollbacks_do(blocked, then):
    run = blocked(f"stop-{then}", then=then, refund=True)
    handle = run.start()
    assert handle.cancel() is True
    # At once, while the worker still holds it in the workflow's code.
    row = Workflow.objects.get(pk=handle.workflow_id)
    assert (row.status, row.cancel_requested, row.lease_token != "") == (
        "cancelled",
        True,
        True,
    )
    with pytest.raises(WorkflowCancelled):
        handle.result(timeout=5)
    # The worker goes on: it stops before "after" and carries the cancel out.
    assert run.go_on() == ["cancelled"]
    assert steps(handle.workflow_id) == ["charge", "refund:ch_1"]
    row.refresh_from_db()
    assert (row.status, row.cancel_requested, row.lease_token) == (
        "cancelled",
        False,
        "",
    )
    assert row.cancel_reason == "cancelled" and row.retry_count == 0
    assert handle.snapshot().state == "cancelled"
    assert [entry.location for entry in handle.history()] == ["start", "charge"]


def test_once_cancel_returns_no_child_starts(blocked):
    run = blocked("no-child", then="child")
    handle = run.start()
    assert handle.cancel() is True
    assert run.go_on() == ["cancelled"]
    assert not Workflow.objects.filter(parent_id=handle.workflow_id).exists()
    assert handle.status == "cancelled"


@settings
def test_a_cancel_frees_the_queue_slot_at_once(blocked):
    """DBOS test_cancelling_queued_workflows: the next one runs, CANCELLED stays."""
    run = blocked("slot-holder", then="step")
    holder = run.start(queue="single")
    waiting = workflows.start("greet", {"name": "next"}, queue="single")
    assert waiting.status == "queued"
    assert holder.cancel() is True
    # Admitted by the cancel's own admission pass, before the holder let go.
    assert waiting.status == "pending"
    assert Workflow.objects.get(pk=holder.workflow_id).lease_token != ""
    assert run_until_idle(waiting) == "completed"
    # The cancelled one's code goes on and ends: it stays cancelled.
    assert run.go_on() == ["cancelled"]
    assert holder.status == "cancelled"
    with pytest.raises(WorkflowCancelled):
        holder.result(timeout=5)
    assert steps(holder.workflow_id) == ["charge"]


def test_cancel_resume(blocked):
    """DBOS test_cancel_resume: stopped after step one; a resume runs step two."""
    run = blocked("cancel-resume", then="step")
    handle = run.start()
    assert handle.cancel() is True
    run.go_on()
    with pytest.raises(WorkflowCancelled):
        handle.result(timeout=5)
    assert steps(handle.workflow_id) == ["charge"]
    assert handle.resume() is True
    assert run_until_idle(handle) == "completed"
    assert handle.result() == "done"
    assert steps(handle.workflow_id) == ["charge", "after"]
    # A second resume does not run it again (DBOS returns the handle; here
    # resume() tells that it changed nothing).
    assert handle.resume() is False
    assert steps(handle.workflow_id) == ["charge", "after"]


def test_cancel_resume_txn(blocked):
    """DBOS test_cancel_resume_txn: the same with transactional steps."""
    run = blocked("cancel-resume-txn", then="transaction")
    handle = run.start()
    assert handle.cancel() is True
    run.go_on()
    assert steps(handle.workflow_id) == ["charge"]
    assert handle.resume() is True
    assert run_until_idle(handle) == "completed"
    assert steps(handle.workflow_id) == ["charge", "after"]


@settings
def test_cancel_resume_queue(blocked):
    """DBOS test_cancel_resume_queue: a queued workflow, resumed outside its queue."""
    run = blocked("cancel-resume-queue", then="step")
    handle = run.start(queue="single")
    assert handle.cancel() is True
    assert handle.status == WorkflowStatus.CANCELLED
    run.go_on()
    assert handle.resume() is True
    assert run_until_idle(handle) == "completed"
    assert steps(handle.workflow_id) == ["charge", "after"]
    assert (
        Workflow.objects.filter(queue="single").exclude(status="completed").count() == 0
    )


def test_cancel_after_final_step(blocked):
    """DBOS test_cancel_after_final_step: cancelled after its last step, before
    it returns, it never completes; a resume completes it without the step."""
    run = blocked("after-final", then="nothing")
    handle = run.start()
    assert handle.cancel() is True
    assert run.go_on() == ["cancelled"]
    with pytest.raises(WorkflowCancelled):
        handle.result(timeout=5)
    assert handle.status == "cancelled"
    assert handle.resume() is True
    assert run_until_idle(handle) == "completed"
    assert steps(handle.workflow_id) == ["charge"]


def test_resume_before_a_worker_carried_the_cancel_out_withdraws_it(tmp_path):
    # Nobody ran it since the cancel (the holder let go without running):
    # a resume just goes on, the cancel never reached its history.
    gate = tmp_path / "gate"
    gate.touch()
    handle = workflows.start(
        "blockedBetweenSteps",
        {"entered": str(tmp_path / "entered"), "gate": str(gate)},
        id="withdrawn",
    )
    Workflow.objects.filter(pk="withdrawn").update(
        status="cancelled", cancel_requested=True, cancel_reason="cancelled"
    )
    assert handle.status == "cancelled"
    assert handle.resume() is True
    row = Workflow.objects.get(pk="withdrawn")
    assert (row.status, row.cancel_requested, row.cancel_reason) == (
        "sleeping",
        False,
        "",
    )
    assert run_until_idle(handle) == "completed"
    assert steps("withdrawn") == ["charge", "after"]


@workflow(name="nests")
async def nests(ctx, input):
    await ctx.start_child("loose", "approval", {}, detached=True)
    await ctx.start_child("inner", "waitsForChild", {"seconds": 60})
    await ctx.messages.next("wait", names=["go"])


def test_cancel_workflow_children():
    """DBOS test_cancel_workflow_children: the subtree is cancelled at once.

    DBOS cancels children only with ``cancel_children=True``; here a cancel
    always reaches the non-detached children (docs/workflows.md, "Children
    and their parent's end"), down to the grandchildren, before it returns.
    """
    with register_temporarily(nests):
        parent = workflows.start("nests", {}, id="tree")
        run_due()
        run_due()
        tree = ["tree", "tree/inner", "tree/inner/nap", "tree/loose"]
        assert statuses(tree) == ["sleeping"] * 4
        assert parent.cancel() is True
        assert statuses(tree) == ["cancelled", "cancelled", "cancelled", "sleeping"]
        assert Workflow.objects.get(pk="tree/inner/nap").cancel_reason == (
            "parent_cancelled"
        )
        run_due()  # the workers carry the children's cancels out
        assert not Workflow.objects.filter(cancel_requested=True).exists()
        assert statuses(tree) == ["cancelled", "cancelled", "cancelled", "sleeping"]


def statuses(ids: list[str]) -> list[str]:
    found = dict(Workflow.objects.filter(pk__in=ids).values_list("pk", "status"))
    return [found.get(pk, "missing") for pk in ids]


def test_a_parent_waiting_for_a_cancelled_child_is_woken_at_once():
    parent = workflows.start("waitsForChild", {"seconds": 60}, id="waiter")
    assert run_until_idle(parent) == "sleeping"
    child = workflows.get("waiter/nap")
    assert child.cancel() is True
    assert Workflow.objects.get(pk="waiter").wake_at is not None
    assert run_until_idle(parent) == "failed"  # ChildWorkflowError: cancelled
    with contextlib.suppress(Exception):
        parent.result(timeout=5)
    assert parent.snapshot().error["name"] == "ChildWorkflowError"
