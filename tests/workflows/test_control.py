"""Deleting workflows on demand (issue 44): handles, in bulk, and the command.

The tests named after DBOS Transact's (tests/test_workflow_management.py)
are translations of them.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from django_rivet import WorkflowActive, workflows
from django_rivet.models import (
    Workflow,
    WorkflowAttribute,
    WorkflowKV,
    WorkflowMessage,
)
from django_rivet.testing import run_due, run_until_idle
from django_rivet.workflows import leases

# pg: the PostgreSQL leg runs this module (the rows are locked before the
# check, and cascades delete the rows a workflow owns).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


def owned_rows(workflow_id):
    return [
        model.objects.filter(workflow_id=workflow_id).count()
        for model in (WorkflowKV, WorkflowMessage, WorkflowAttribute)
    ]


def test_delete_workflow():
    """DBOS test_delete_workflow: with and without the children."""
    parent = workflows.start("waitsForChild", {"seconds": 0}, id="p1")
    run_due()
    run_due()
    assert parent.status == "completed"
    assert parent.delete(children=False) is True
    assert not Workflow.objects.filter(pk="p1").exists()
    assert workflows.get("p1/nap").status == "completed"  # the child stays

    again = workflows.start(
        "waitsForChild", {"seconds": 0}, id="p2", attributes={"t": 1}
    )
    # Sent while it runs (a finished workflow refuses messages), never read.
    workflows.get("p2").send("late", "never read")
    run_due()
    run_due()
    assert sum(owned_rows("p2")) > 0 and sum(owned_rows("p2/nap")) > 0
    assert again.delete(children=True) is True
    assert not Workflow.objects.filter(pk__startswith="p2").exists()
    assert owned_rows("p2") == owned_rows("p2/nap") == [0, 0, 0]
    # Deleting it again changes nothing (DBOS: no error either).
    assert again.delete() is False


def test_bulk_delete():
    """DBOS test_bulk_delete."""
    ids = []
    for index in range(3):
        handle = workflows.start("greet", {"name": str(index)}, id=f"bulk-{index}")
        run_until_idle(handle)
        ids.append(handle.workflow_id)
    assert workflows.delete([*ids, "never-there"]) == 3
    assert not Workflow.objects.filter(pk__in=ids).exists()


def test_an_active_workflow_is_refused_and_nothing_is_deleted():
    done = workflows.start("greet", {"name": "x"}, id="done")
    run_until_idle(done)
    waiting = workflows.start("approval", {}, id="waiting")
    run_until_idle(waiting)
    with pytest.raises(WorkflowActive) as info:
        workflows.delete(["done", "waiting"])
    assert info.value.qualified_code == "workflow/active"
    assert info.value.metadata == {"workflow_id": "waiting", "status": "sleeping"}
    assert Workflow.objects.filter(pk__in=["done", "waiting"]).count() == 2
    # Cancelled, it can go; a cancel still being carried out cannot.
    held = workflows.start("rowWriter", {"steps": 1}, id="held")
    lease = leases.claim("held")
    held.cancel()
    with pytest.raises(WorkflowActive):
        held.delete()
    leases.release(lease, status="sleeping")
    run_until_idle(held)
    waiting.cancel()
    assert workflows.delete(["done", "waiting", "held"]) == 3


def test_deleting_with_children_refuses_an_active_child():
    parent = workflows.start("family", {}, id="fam")
    run_until_idle(parent)
    parent.cancel()
    run_due()
    assert workflows.get("fam/audit").status == "sleeping"  # detached, runs on
    with pytest.raises(WorkflowActive, match="fam/audit"):
        parent.delete(children=True)
    assert parent.delete() is True  # alone


def run(*args):
    out = io.StringIO()
    call_command("rivet_workflows", *args, stdout=out)
    return out.getvalue()


def test_rivet_workflows_delete_removes_finished_ones_only():
    for index in range(2):
        run_until_idle(workflows.start("greet", {"name": "x"}, id=f"old-{index}"))
    workflows.start("approval", {}, id="running")
    dry = run("delete", "--dry-run")
    assert "would delete old-0" in dry and "running" not in dry
    assert Workflow.objects.count() == 3
    done = run("delete")
    assert done.endswith("deleted: 2, skipped: 0, errors: 0\n")
    assert list(Workflow.objects.values_list("pk", flat=True)) == ["running"]
    with pytest.raises(CommandError, match="delete acts on completed"):
        run("delete", "--status", "sleeping")
