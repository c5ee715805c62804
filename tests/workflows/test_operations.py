"""Operating workflows (issue 27), through the Django runtime on both databases.

Children, replies and published values, search, deadlines, tracebacks; the
virtual clock and ``run_until_idle`` drive everything, nothing sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async

from django_rivet import (
    Actor,
    WorkflowIdConflict,
    WorkflowInboxFull,
    WorkflowNotFound,
    action,
    actors,
    clock,
    workflows,
)
from django_rivet.engine import (
    ChildWorkflowError,
    WorkflowCancelled,
    WorkflowNoReply,
    WorkflowRequestTimeout,
    WorkflowTimeout,
    keys,
)
from django_rivet.models import Workflow, WorkflowKV, WorkflowMessage
from django_rivet.testing import (
    arun_until_idle,
    freeze_time,
    register_temporarily,
    run_due,
    run_until_idle,
)
from django_rivet.workflows import WorkflowCannotWait, WorkflowFinished, sends, workflow
from tests.support.threads import in_threads_each
from tests.testapp.models import StepRow

# pg: the PostgreSQL leg runs this module (JSON-field lookups (filter by wait),
# rollbacks).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


def steps_recorded():
    return sorted(StepRow.objects.values_list("workflow_id", "step"))


# -- children --------------------------------------------------------------------------
def test_a_parent_waits_durably_for_a_child_that_sleeps():
    with freeze_time() as frozen:
        parent = workflows.start("waitsForChild", {"seconds": 60}, id="p")
        assert run_until_idle(parent) == "sleeping"
        child = workflows.get("p/nap")  # "<parent id>/<entry location>"
        assert (child.name, child.parent_id, parent.parent_id) == ("napper", "p", None)
        assert run_until_idle(child) == "sleeping"
        row = Workflow.objects.get(pk="p")
        assert (row.waiting_for, row.wake_at) == (["child:p/nap"], None)
        assert workflows.filter(waiting_for="child:p/nap") == [parent]
        assert workflows.filter(parent_id="p") == [child]
        assert run_until_idle(parent) == "sleeping"  # not woken: nothing ran
        frozen.advance(60)
        assert run_until_idle(child) == "completed"
        # The child's end made the parent due: it finishes with the output.
        assert Workflow.objects.get(pk="p").wake_at <= clock.now_datetime()
        assert run_until_idle(parent) == "completed"
    assert parent.result() == {"child": "rested"}
    [entry] = parent.history()
    assert (entry.kind, entry.location, entry.status, entry.output) == (
        "child",
        "nap",
        "completed",
        "rested",
    )
    assert Workflow.objects.count() == 2  # replays started no second child


def test_a_failed_child_fails_its_parent_with_child_failed():
    parent = workflows.start("parentOfDoomed", {}, id="pd")
    assert run_until_idle(parent) == "sleeping"
    assert run_until_idle("pd/boom") == "failed"
    assert run_until_idle(parent) == "failed"
    with pytest.raises(ChildWorkflowError) as info:
        parent.result()
    assert info.value.qualified_code == "workflow/child_failed"
    assert info.value.child_id == "pd/boom"
    assert info.value.child_error["message"] == "no way"
    guarded = workflows.start("parentOfDoomed", {"guard": True}, id="pg")
    run_until_idle(guarded)
    run_until_idle("pg/guard/boom")
    assert run_until_idle(guarded) == "completed"
    assert guarded.result() == {"ok": False, "kind": "child"}


def test_cancelling_the_parent_cancels_its_children_and_runs_their_rollbacks():
    parent = workflows.start("family", {}, id="fam")
    assert run_until_idle(parent) == "sleeping"
    for child_id in ("fam/audit", "fam/helper", "fam/refunder"):
        assert run_until_idle(child_id) == "sleeping"
    assert steps_recorded() == []
    assert parent.cancel() is True
    assert parent.status == "cancelled"
    with pytest.raises(WorkflowCancelled):
        parent.result()
    # The workers carry the children's cancels out, with their rollbacks.
    run_due()
    statuses = dict(
        Workflow.objects.filter(parent_id="fam").values_list("id", "status")
    )
    assert statuses == {
        "fam/audit": "sleeping",  # detached: it outlives its parent
        "fam/helper": "cancelled",
        "fam/refunder": "cancelled",
    }
    assert steps_recorded() == [("fam/refunder", "refund:ch_1")]
    with pytest.raises(WorkflowCancelled) as info:
        workflows.get("fam/refunder").result()
    assert info.value.reason == "parent_cancelled"
    assert Workflow.objects.get(pk="fam/refunder").cancel_reason == "parent_cancelled"


def test_a_child_of_a_cancelled_parent_cancels_itself_when_it_runs():
    # The parent's request to its children may be lost (a crash right after
    # the parent's cancel committed): the child's next claim catches it.
    parent = workflows.start("waitsForChild", {"seconds": 60}, id="lost")
    run_until_idle(parent)
    Workflow.objects.filter(pk="lost").update(status="cancelled")
    Workflow.objects.filter(pk="lost/nap").update(wake_at=clock.now_datetime())
    assert run_until_idle("lost/nap") == "cancelled"


@workflow(name="handsOff")
async def hands_off(ctx, input):
    """Starts a napping child, a detached one, maybe waits for a third."""
    await ctx.start_child("nap", "napper", {"seconds": 3600})
    await ctx.start_child("free", "napper", {"seconds": 3600}, detached=True)
    if input.get("wait"):
        return await ctx.child("waited", "napper", {"seconds": 3600}, timeout=30)
    return "handed off"


def deadlines(*ids):
    found = dict(Workflow.objects.filter(pk__in=ids).values_list("pk", "deadline_at"))
    return [found[pk] for pk in ids]


def test_a_child_s_deadline_is_never_later_than_its_parent_s():
    # The parent hands work to a child and exits: the child still ends at
    # the parent's deadline; the detached one runs on.
    with register_temporarily(hands_off), freeze_time() as frozen:
        parent = workflows.start("handsOff", {}, id="hand", timeout=60)
        assert run_until_idle(parent) == "completed"
        deadline = Workflow.objects.get(pk="hand").deadline_at
        assert deadlines("hand/nap", "hand/free") == [deadline, None]
        run_due()
        frozen.advance(60)
        run_due()
        assert workflows.get("hand/nap").status == "cancelled"
        assert workflows.get("hand/free").status == "sleeping"
        with pytest.raises(WorkflowTimeout):
            workflows.get("hand/nap").result()


def test_workflow_timeout():
    """DBOS test_workflow_timeout: a parent's deadline reaches its children.

    The parent starts one child and waits for another (with a shorter
    timeout of its own, which stays); at the parent's deadline the parent
    and its children are cancelled.
    """
    with register_temporarily(hands_off), freeze_time() as frozen:
        workflows.start("handsOff", {"wait": True}, id="tp", timeout=60)
        started = clock.now()
        run_due()
        assert deadlines("tp/nap", "tp/waited") == [
            clock.to_datetime(started + 60),
            clock.to_datetime(started + 30),
        ]
        frozen.advance(60)
        run_due()
        run_due()
        for workflow_id in ("tp", "tp/nap", "tp/waited"):
            with pytest.raises(WorkflowCancelled):
                workflows.get(workflow_id).result()
        assert workflows.get("tp/free").status == "sleeping"


@workflow(name="adopter")
async def adopter(ctx, input):
    """Waits for the workflow ``input["id"]`` as its child (the id may exist)."""
    name = input.get("workflow", "greet")
    first = await ctx.child("first", name, input, id=input["id"])
    again = await ctx.start_child("again", name, input, id=input["id"])
    return [first, again]


def test_child_workflow_assigned_id():
    """DBOS test_child_workflow_assigned_id: a child id is an idempotency key.

    A second entry, and a second parent, naming the id get the recorded
    result; the step ran once and the child keeps its first parent.
    """
    with register_temporarily(adopter):
        one = workflows.start("adopter", {"id": "assigned", "name": "ann"}, id="p1")
        run_due()
        run_due()
        assert one.result() == ["hello ann", "assigned"]
        two = workflows.start("adopter", {"id": "assigned", "name": "bob"}, id="p2")
        assert run_until_idle(two) == "completed"
        assert two.result() == ["hello ann", "assigned"]  # the recorded one
        assert workflows.get("assigned").parent_id == "p1"
        assert [e.kind for e in workflows.get("assigned").history()] == ["step"]


def test_a_child_id_held_by_another_workflow_name_is_an_id_conflict():
    workflows.start("approval", {}, id="taken")
    with register_temporarily(adopter):
        parent = workflows.start("adopter", {"id": "taken"}, id="conflicted")
        assert run_until_idle(parent) == "failed"
    error = parent.snapshot().error
    assert error["name"] == "WorkflowIdConflict"
    assert "'taken' is already used by a 'approval' workflow" in error["message"]
    with pytest.raises(WorkflowIdConflict) as info:
        workflows.start("greet", {"name": "x"}, id="taken")
    assert info.value.qualified_code == "workflow/id_conflict"
    assert isinstance(info.value, ValueError)
    assert info.value.metadata == {"workflow_id": "taken", "name": "approval"}


def test_a_parent_waiting_for_a_workflow_it_did_not_start_is_woken_when_it_ends():
    napping = workflows.start("napper", {"seconds": 60}, id="shared-nap")
    with register_temporarily(adopter), freeze_time() as frozen:
        assert run_until_idle(napping) == "sleeping"
        waiter = workflows.start(
            "adopter", {"id": "shared-nap", "workflow": "napper"}, id="waiter"
        )
        assert run_until_idle(waiter) == "sleeping"
        assert Workflow.objects.get(pk="shared-nap").awaited_by == ["waiter"]
        frozen.advance(60)
        assert run_until_idle(napping) == "completed"
        # Its end woke the waiter (which is not its parent).
        assert Workflow.objects.get(pk="waiter").wake_at <= clock.now_datetime()
        assert run_until_idle(waiter) == "completed"
    assert waiter.result() == ["rested", "shared-nap"]
    assert napping.parent_id is None


# -- replies ---------------------------------------------------------------------------
def test_request_gets_the_reply_once_even_when_the_workflow_replays():
    with freeze_time() as frozen:
        handle = workflows.start("asker", {}, id="ask")
        assert run_until_idle(handle) == "sleeping"
        reply = handle.request("approve", {"by": "ann"}, timeout=30)
        assert reply == {"ok": True, "by": "ann"}
        # The request ran the workflow up to its reply; the rest is the
        # workers' (here: run_until_idle), through replays of the reply.
        assert run_until_idle(handle) == "sleeping"
        frozen.advance(60)
        assert run_until_idle(handle) == "completed"
    replies = [e for e in handle.history() if e.kind == "reply"]
    assert [(e.location, e.output) for e in replies] == [
        ("answer", {"ok": True, "by": "ann"})
    ]
    # Taken by the requester and never published again by the replays.
    reply_keys = WorkflowKV.objects.filter(
        workflow_id="ask", key__startswith=keys.pack((keys.PUBLISHED,))
    )
    assert not reply_keys.exists()
    assert Workflow.objects.get(pk="ask").run_count >= 3


def test_request_fails_at_once_when_the_workflow_ends_without_replying():
    handle = workflows.start("silent", {}, id="silent")
    run_until_idle(handle)
    with pytest.raises(WorkflowNoReply) as info:
        handle.request("approve", {"by": "ann"}, timeout=60)
    assert info.value.qualified_code == "workflow/no_reply"
    assert handle.status == "completed"


def test_request_times_out_and_withdraws_its_message():
    handle = workflows.start("approval", {}, id="deaf")
    run_until_idle(handle)  # waits for "approve", not "question"
    with pytest.raises(WorkflowRequestTimeout) as info:
        handle.request("question", {"q": 1}, timeout=0.1)
    assert info.value.qualified_code == "workflow/request_timeout"
    assert isinstance(info.value, TimeoutError)
    assert not WorkflowMessage.objects.filter(workflow_id="deaf").exists()


class Desk(Actor):
    name = "approvalDesk"
    initial_state = {"asked": 0}

    @action
    def ask(self, ctx, workflow_id, by):
        ctx.state["asked"] += 1
        return ctx.workflows.get(workflow_id).request("approve", {"by": by}, 30)

    @action
    async def aask(self, ctx, workflow_id, by):
        handle = await ctx.workflows.aget(workflow_id)
        return await handle.arequest("approve", {"by": by}, timeout=30)


def test_an_actor_action_gets_a_reply_inside_its_transaction():
    first = workflows.start("asker", {}, id="desk-1")
    second = workflows.start("asker", {}, id="desk-2")
    run_until_idle(first)
    run_until_idle(second)
    with register_temporarily(Desk):
        desk = actors.get_or_create("approvalDesk", "main")
        assert desk.call("ask", "desk-1", "ann") == {"ok": True, "by": "ann"}
        assert desk.call("aask", "desk-2", "bob") == {"ok": True, "by": "bob"}
    # The action's request ran the workflow up to its reply, in the action's
    # transaction; the rest (the sleep) is left to the workers.
    assert [e.kind for e in first.history()] == ["message", "reply"]
    assert run_until_idle(first) == "sleeping"
    assert [e.kind for e in first.history()] == ["message", "reply", "sleep"]


class Waiter(Actor):
    """Waits for workflows from inside its actions: refused, never held."""

    name = "waiter"
    initial_state = {"refused": 0}
    entered = threading.Event()

    @action
    def ask(self, ctx, workflow_id):
        self.entered.set()
        handle = ctx.workflows.get(workflow_id)
        try:
            return handle.request("question", {"q": 1}, timeout=3600)
        except WorkflowCannotWait as error:
            ctx.state["refused"] += 1
            return error.qualified_code

    @action
    def refusals(self, ctx):
        return ctx.state["refused"]

    @action
    def result(self, ctx, workflow_id):
        return ctx.workflows.get(workflow_id).result(timeout=3600)

    @action
    async def aresult(self, ctx, workflow_id):
        handle = await ctx.workflows.aget(workflow_id)
        return await handle.aresult(timeout=3600)

    @action
    def event(self, ctx, workflow_id, timeout):
        return ctx.workflows.get(workflow_id).get_event("progress", timeout)


def test_a_request_the_workflow_cannot_answer_here_is_refused_at_once():
    # The workflow waits for "approve", not "question": nothing would
    # answer before the action commits, so the request does not wait (for
    # an hour, holding the transaction) but is withdrawn and refused.
    Waiter.entered.clear()
    handle = workflows.start("approval", {}, id="busy-approval")
    run_until_idle(handle)
    with register_temporarily(Waiter):
        waiter = actors.get_or_create("waiter", "w")
        outcome = {}

        def ask():
            outcome["ask"] = waiter.call("ask", "busy-approval")

        def other_actor():
            # Another actor's call while the request runs: on SQLite it
            # needs the write lock the action holds.
            Waiter.entered.wait(30)
            outcome["other"] = actors.get_or_create("counter", "bystander").call(
                "increment", 1
            )

        errors = in_threads_each([ask, other_actor], timeout=60)
        assert errors == []
        assert outcome == {"ask": "workflow/cannot_wait", "other": 1}
        assert waiter.call("ask", "busy-approval") == "workflow/cannot_wait"
        assert waiter.call("refusals") == 2
    # Withdrawn: the workflow gets no request nobody waits for.
    assert not WorkflowMessage.objects.filter(workflow_id="busy-approval").exists()
    assert handle.status == "sleeping"


def test_result_and_event_waits_are_refused_inside_an_action_not_held():
    handle = workflows.start("publisher", {}, id="pub-wait")
    with register_temporarily(Waiter):
        waiter = actors.get_or_create("waiter", "r")
        for action_name in ("result", "aresult"):
            with pytest.raises(WorkflowCannotWait) as refused:
                waiter.call(action_name, "pub-wait")
            assert refused.value.qualified_code == "workflow/cannot_wait"
            assert "pub-wait" not in refused.value.message  # only logged
        with pytest.raises(WorkflowCannotWait):
            waiter.call("event", "pub-wait", 3600)
        assert waiter.call("event", "pub-wait", None) is None  # no wait asked
        run_until_idle(handle)  # sets progress 1, waits for "next"
        assert waiter.call("event", "pub-wait", 3600) == {"done": 1}
        handle.send("next")
        assert run_until_idle(handle) == "completed"
        # Finished: nothing to wait for.
        assert waiter.call("result", "pub-wait") == "published"
        assert waiter.call("aresult", "pub-wait") == "published"


def test_a_workflow_step_requests_from_another_workflow():
    target = workflows.start("asker", {}, id="target")
    run_until_idle(target)
    caller = workflows.start("asksAnother", {"target": "target"}, id="caller")
    assert run_until_idle(caller) == "completed"
    assert caller.result() == {"ok": True, "by": "caller"}
    assert run_until_idle(target) == "sleeping"  # the rest of the target


async def test_arequest_outside_an_action():
    handle = await workflows.astart("asker", {}, id="async-ask")
    await arun_until_idle(handle)
    assert await handle.arequest("approve", {"by": "cy"}, timeout=30) == {
        "ok": True,
        "by": "cy",
    }


# -- published values ------------------------------------------------------------------
def test_get_event_of_a_workflow_that_does_not_exist_raises_not_found():
    """DBOS test_get_event_timeout's missing id, deliberately different.

    DBOS's ``get_event`` returns None for an id no workflow has; here a
    handle names a workflow that exists, so it is ``WorkflowNotFound``
    (docs/workflows.md, "Coming from DBOS"); an unset key is None.
    """
    with pytest.raises(WorkflowNotFound):
        workflows.WorkflowHandle("nobody", "publisher").get_event("progress")
    with pytest.raises(WorkflowNotFound):
        workflows.get("nobody")


async def test_get_event_sees_the_latest_value_and_waits_for_one():
    handle = await workflows.astart("publisher", {}, id="pub")
    assert await handle.aget_event("progress") is None  # never set, no wait
    # One waits for a first value while the workflow runs and sets it.
    first, status = await asyncio.gather(
        handle.aget_event("progress", timeout=30), arun_until_idle(handle)
    )
    assert (first, status) == ({"done": 1}, "sleeping")
    await handle.asend("next")
    assert await arun_until_idle(handle) == "completed"
    assert await handle.aget_event("progress") == {"done": 2}
    # Sync, and a key the finished workflow never set: None, without waiting.
    get_event = sync_to_async(handle.get_event)
    assert await get_event("progress") == {"done": 2}
    assert await get_event("other", timeout=60) is None


# -- search ----------------------------------------------------------------------------
def test_filter_finds_workflows_by_status_name_wait_and_age():
    with freeze_time() as frozen:
        done = workflows.start("greet", {"name": "ann"}, id="done")
        run_until_idle(done)
        frozen.advance(10)
        middle = clock.now_datetime()
        frozen.advance(10)
        waiting = workflows.start("approval", {}, id="waiting")
        frozen.advance(1)
        asker = workflows.start("asker", {}, id="asking")
        frozen.advance(1)
        napping = workflows.start("napper", {}, id="napping")
        for handle in (waiting, asker, napping):
            run_until_idle(handle)
        frozen.advance(1)
        fresh = workflows.start("greet", {"name": "new"}, id="fresh")

    assert workflows.filter(status="completed") == [done]
    assert workflows.filter(status=["pending", "completed"]) == [fresh, done]
    assert workflows.filter(waiting_for="approve") == [asker, waiting]
    assert workflows.filter(waiting_for="approve", name="approval") == [waiting]
    assert workflows.filter(status="sleeping", waiting_for="nothing") == []
    assert workflows.filter(created_before=middle) == [done]
    assert workflows.filter(created_after=middle, limit=2) == [fresh, napping]
    assert workflows.filter() == [fresh, napping, asker, waiting, done]
    assert workflows.count(status="sleeping") == 3
    assert workflows.count(waiting_for="approve", created_after=middle) == 2
    assert workflows.count() == 5
    with pytest.raises(ValueError, match="Unknown workflow status"):
        workflows.filter(status="asleep")


async def test_filter_and_count_have_async_twins():
    await workflows.astart("greet", {"name": "a"}, id="a1")
    assert await workflows.afilter(name="greet") == [
        workflows.WorkflowHandle("a1", "greet")
    ]
    assert await workflows.acount(status="pending") == 1


# -- deadlines -------------------------------------------------------------------------
def test_a_deadline_cancels_the_workflow_and_runs_its_rollbacks():
    with freeze_time() as frozen:
        handle = workflows.start("deadlined", {}, id="late")
        started = clock.now_datetime()
        assert run_until_idle(handle) == "sleeping"
        row = Workflow.objects.get(pk="late")
        # Waiting for a message only, it still wakes at its deadline.
        assert row.deadline_at == row.wake_at == started + timedelta(minutes=5)
        frozen.advance(299)
        assert run_until_idle(handle) == "sleeping"
        assert steps_recorded() == []
        frozen.advance(1)
        assert run_until_idle(handle) == "cancelled"
    assert steps_recorded() == [("late", "refund:ch_1")]
    with pytest.raises(WorkflowTimeout) as info:
        handle.result()
    assert info.value.qualified_code == "workflow/timeout"
    assert isinstance(info.value, WorkflowCancelled)
    assert Workflow.objects.get(pk="late").cancel_reason == "timeout"


def test_a_workflow_done_in_time_is_not_cancelled_and_start_overrides_the_timeout():
    with freeze_time() as frozen:
        handle = workflows.start("deadlined", {}, id="on-time", timeout=30)
        run_until_idle(handle)
        handle.send("go")
        assert run_until_idle(handle) == "completed"
        frozen.advance(3600)
        assert run_until_idle(handle) == "completed"
        assert handle.result() == "in time"
        short = workflows.start("approval", {}, timeout=timedelta(seconds=5))
        run_until_idle(short)
        frozen.advance(5)
        assert run_until_idle(short) == "cancelled"
    with pytest.raises(ValueError):
        workflows.start("approval", {}, timeout=0)


def test_resume_continues_a_cancelled_workflow_without_its_deadline():
    with freeze_time() as frozen:
        handle = workflows.start("approval", {}, id="again", timeout=10)
        run_until_idle(handle)
        frozen.advance(10)
        assert run_until_idle(handle) == "cancelled"
        assert handle.resume() is True
        assert Workflow.objects.get(pk="again").deadline_at is None
        handle.send("approve", {"by": "late"})
        assert run_until_idle(handle) == "completed"
        assert handle.resume() is False
    assert handle.result() == {"approved_by": "late"}
    refunded = workflows.start("deadlined", {}, id="refunded")
    run_until_idle(refunded)
    refunded.cancel()
    assert refunded.resume() is False  # its cancel ran rollbacks


# -- errors people can act on ----------------------------------------------------------
def test_a_failed_steps_traceback_is_in_history_and_in_the_log(caplog):
    caplog.set_level(logging.WARNING, logger="django_rivet")
    handle = workflows.start("divider", {}, id="ratio")
    assert run_until_idle(handle) == "failed"
    [entry] = handle.history()
    traceback = entry.error["traceback"]
    assert "in ratio" in traceback and "return 1 / input.get" in traceback
    assert traceback.endswith("ZeroDivisionError: division by zero\n")
    [record] = [r for r in caplog.records if r.name == "django_rivet.workflow"]
    assert record.levelno == logging.WARNING
    assert "workflow=ratio step=ratio attempt=1" in record.getMessage()
    assert "return 1 / input.get" in caplog.text  # the traceback is printed


# -- inboxes --------------------------------------------------------------------------
def test_a_workflow_inbox_is_bounded(monkeypatch):
    monkeypatch.setattr(sends, "MAX_INBOX_MESSAGES", 5)
    handle = workflows.start("approval", {}, id="inbox-bound")
    run_until_idle(handle)
    for n in range(5):
        handle.send("noise", n)
    with pytest.raises(WorkflowInboxFull) as info:
        handle.send("noise", 5)
    assert info.value.qualified_code == "workflow/inbox_full"
    # The refused message was not stored.
    assert WorkflowMessage.objects.filter(workflow_id="inbox-bound").count() == 5


def test_a_finished_workflow_refuses_messages_until_recovered():
    done = workflows.start("greet", {"name": "x"}, id="done-inbox")
    assert run_until_idle(done) == "completed"
    with pytest.raises(WorkflowFinished) as info:
        done.send("late", "x" * 1000)
    assert info.value.qualified_code == "workflow/finished"
    assert info.value.http_status == 409
    assert info.value.metadata == {"status": "completed"}
    with pytest.raises(WorkflowFinished):
        done.request("late", timeout=5)
    stopped = workflows.start("approval", {}, id="cancelled-inbox")
    run_until_idle(stopped)
    stopped.cancel()
    with pytest.raises(WorkflowFinished):
        stopped.send("approve", {"by": "ann"})
    assert not WorkflowMessage.objects.filter(
        workflow_id__in=["done-inbox", "cancelled-inbox"]
    ).exists()
    # Resumed, it is a workflow that takes messages again.
    assert stopped.resume()
    stopped.send("approve", {"by": "ann"})
    assert run_until_idle(stopped) == "completed"
