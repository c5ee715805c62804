"""Forking a workflow from a step into a new one (issue 44).

The tests named after DBOS Transact's (tests/test_workflow_management.py)
are translations of them; DBOS forks from a step's number, here from the
step's location as ``history()`` shows it.
"""

from __future__ import annotations

import collections

import pytest
from django.test import override_settings

from django_rivet import WorkflowNotFound, workflows
from django_rivet.engine import EntryNotFoundError
from django_rivet.models import Workflow
from django_rivet.testing import (
    freeze_time,
    register_temporarily,
    run_due,
    run_until_idle,
)
from django_rivet.workflows import workflow
from tests.testapp.models import StepRow

# pg: the PostgreSQL leg runs this module (the copy, the cut and the new row
# in one transaction).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


def runs_per_step():
    return collections.Counter(StepRow.objects.values_list("step", flat=True))


def test_fork_steps():
    """DBOS test_fork_steps: the steps before the fork point do not run again."""
    original = workflows.start("rowWriter", {"steps": 5}, id="orig")
    assert run_until_idle(original) == "completed"
    before = [(e.location, e.status) for e in original.history()]
    fork = original.fork("s2", id="fork-1")
    assert fork.workflow_id == "fork-1" and fork.name == "rowWriter"
    assert [e.location for e in fork.history()] == ["s0", "s1"]
    assert run_until_idle(fork) == "completed"
    assert fork.result() == 5
    assert runs_per_step() == {"s0": 1, "s1": 1, "s2": 2, "s3": 2, "s4": 2}
    second = original.fork("s4")
    assert run_until_idle(second) == "completed"
    third = original.fork("s0")
    assert run_until_idle(third) == "completed"
    assert runs_per_step() == {"s0": 2, "s1": 2, "s2": 3, "s3": 3, "s4": 4}
    # The original is untouched.
    assert [(e.location, e.status) for e in original.history()] == before
    assert original.status == "completed"


@workflow(name="publishesTwice")
async def publishes_twice(ctx, input):
    await ctx.set_event("progress", 1)
    await ctx.step("middle", lambda: input.get("version", 1))
    await ctx.set_event("progress", 2)
    await ctx.set_event("late", True)
    return "done"


def test_fork_events():
    """DBOS test_fork_events: the fork starts with the values up to its step."""
    with register_temporarily(publishes_twice):
        original = workflows.start("publishesTwice", {}, id="pub")
        run_until_idle(original)
        assert original.get_events() == {"progress": 2, "late": True}
        fork = original.fork("middle")
        assert fork.get_events() == {"progress": 1}
        assert run_until_idle(fork) == "completed"
        assert fork.get_events() == {"progress": 2, "late": True}
    assert original.get_events() == {"progress": 2, "late": True}


def test_a_fork_runs_the_rest_with_the_code_deployed_now():
    """A simulated deploy: the step after the fork point changed."""
    with register_temporarily(publishes_twice):
        original = workflows.start("publishesTwice", {}, id="v1")
        run_until_idle(original)

    @workflow(name="publishesTwice")
    async def deployed(ctx, input):
        await ctx.set_event("progress", 1)
        value = await ctx.step("middle", lambda: "new code")
        return value

    with register_temporarily(deployed):
        fork = original.fork("middle")
        assert run_until_idle(fork) == "completed"
    assert fork.result() == "new code"
    assert original.result() == "done"


def test_fork_nonexistent_workflow():
    """DBOS test_fork_nonexistent_workflow, and a step the history lacks."""
    with pytest.raises(WorkflowNotFound):
        workflows.WorkflowHandle("nope", "greet").fork("greet")
    handle = workflows.start("greet", {"name": "x"})
    run_until_idle(handle)
    with pytest.raises(EntryNotFoundError):
        handle.fork("missing")
    assert Workflow.objects.count() == 1


@override_settings(RIVET={"WORKFLOW_QUEUES": {"forks": {"concurrency": 1}}})
def test_resume_and_fork_to_queue():
    """DBOS test_resume_and_fork_to_queue: a fork may start through a queue."""
    original = workflows.start("greet", {"name": "q"}, id="src", attributes={"t": 1})
    run_until_idle(original)
    busy = workflows.start("approval", {}, queue="forks")
    run_until_idle(busy)
    fork = original.fork("greet", queue="forks")
    assert fork.status == "queued"
    assert fork.attributes == {"t": 1}  # as DBOS's test_attributes_fork
    busy.send("approve", {"by": "ann"})
    run_due()
    run_due()
    assert fork.status == "completed" and fork.result() == "hello q"


@workflow(name="startsThenWaits")
async def starts_then_waits(ctx, input):
    kid = await ctx.start_child("kid", "napper", {"seconds": 60})
    await ctx.step("note", lambda: "noted")
    return await ctx.child("wait", "napper", {}, id=kid)


def test_a_fork_waiting_for_the_original_s_child_is_woken_when_it_ends():
    with register_temporarily(starts_then_waits), freeze_time() as clock:
        parent = workflows.start("startsThenWaits", {}, id="par")
        run_due()
        assert parent.status == "sleeping"
        fork = parent.fork("note", id="par-fork")
        assert run_until_idle(fork) == "sleeping"  # waits for par/kid too
        assert "par-fork" in Workflow.objects.get(pk="par/kid").awaited_by
        clock.advance(60)
        run_due()
        assert fork.status == "completed" and parent.status == "completed"
    assert fork.result() == parent.result() == "rested"
    assert workflows.count(parent_id="par-fork") == 0  # the kid stays par's
