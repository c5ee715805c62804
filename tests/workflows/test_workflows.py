"""The public workflow API: start, get, result, send, wake, cancel, recover, replay.

What ``django_rivet.workflows`` and its handles offer users, driven
in-process with run_until_idle.
"""

from __future__ import annotations

import pytest
from django.core import checks
from django.db import transaction

from django_rivet import Actor, UserError, action, actors, workflows
from django_rivet.checks import E201
from django_rivet.engine import (
    CriticalError,
    EntryNotFoundError,
    RecordedError,
    ReplayRefusedError,
    StepExhaustedError,
    StepOutputError,
    WorkflowError,
    workflow,
)
from django_rivet.exceptions import (
    AlreadyRegistered,
    WorkflowFinished,
    WorkflowNotFound,
)
from django_rivet.models import Workflow, WorkflowMessage, WorkflowStatus
from django_rivet.testing import (
    arun_until_idle,
    freeze_time,
    register_temporarily,
    run_until_idle,
)
from django_rivet.workflows import leases, registry
from tests.testapp import workflows as test_workflows
from tests.testapp.models import StepRow

# pg: the PostgreSQL leg runs this module (start/send after commit, rollbacks,
# messages).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


# -- start, get, status ----------------------------------------------------------------
def test_start_returns_a_pending_handle_and_run_completes_it():
    handle = workflows.start("greet", {"name": "ann"}, id="greet-1")
    assert (handle.workflow_id, handle.name) == ("greet-1", "greet")
    assert handle.status == WorkflowStatus.PENDING
    assert run_until_idle(handle) == "completed"
    assert handle.status == "completed"
    assert handle.result() == "hello ann"
    row = Workflow.objects.get(pk="greet-1")
    assert row.finished_at is not None and row.run_count == 1
    assert row.lease_token == ""


def test_start_is_idempotent_per_id():
    first = workflows.start("greet", {"name": "ann"}, id="once")
    run_until_idle(first)
    again = workflows.start("greet", {"name": "bob"}, id="once")
    assert again == first
    assert Workflow.objects.filter(pk="once").count() == 1
    assert again.result() == "hello ann"  # the second input changed nothing
    with pytest.raises(ValueError, match="already used"):
        workflows.start("napper", {}, id="once")


def test_start_without_an_id_makes_one_up():
    one, two = (
        workflows.start("greet", {"name": "a"}),
        workflows.start("greet", {"name": "b"}),
    )
    assert one.workflow_id != two.workflow_id


def test_unknown_names_and_ids_are_coded_errors():
    with pytest.raises(WorkflowNotFound) as info:
        workflows.start("noSuchWorkflow", {})
    assert info.value.qualified_code == "workflow/not_found"
    with pytest.raises(WorkflowNotFound):
        workflows.get("missing")
    assert not Workflow.objects.exists()


def test_an_unregistered_definition_cannot_start():
    @workflow(name="adHoc")
    async def ad_hoc(ctx, input):
        return 1

    with pytest.raises(WorkflowNotFound):
        workflows.start(ad_hoc)
    with registry.register_temporarily(ad_hoc):
        handle = workflows.start(ad_hoc)
        assert run_until_idle(handle) == "completed"


def test_an_unstorable_input_is_refused_at_start():
    with pytest.raises(StepOutputError):
        workflows.start("greet", {"name": object()})
    assert not Workflow.objects.exists()


def test_get_returns_a_handle_by_id():
    workflows.start("greet", {"name": "ann"}, id="by-id")
    handle = workflows.get("by-id")
    assert (handle.workflow_id, handle.name, handle.status) == (
        "by-id",
        "greet",
        "pending",
    )


async def test_async_twins():
    handle = await workflows.astart("greet", {"name": "ann"}, id="async-1")
    assert await workflows.aget("async-1") == handle
    assert await handle.astatus() == "pending"
    assert await arun_until_idle(handle) == "completed"
    assert await handle.aresult(timeout=5) == "hello ann"
    assert [e.location for e in await handle.ahistory()] == ["greet"]


# -- result ----------------------------------------------------------------------------
def test_result_raises_the_failure():
    handle = workflows.start("doomed", {})
    assert run_until_idle(handle) == "failed"
    with pytest.raises(CriticalError, match="no way"):
        handle.result()


def test_result_of_a_failure_of_user_code_keeps_the_original_name():
    handle = workflows.start("flaky", {"fail": 9, "max_retries": 0})
    assert run_until_idle(handle) == "failed"
    with pytest.raises(StepExhaustedError):
        handle.result()
    snapshot = handle.snapshot()
    assert snapshot.error["name"] == "StepExhaustedError"
    assert RecordedError("RuntimeError", "x").original_name == "RuntimeError"


def test_result_times_out_while_nothing_runs_the_workflow():
    handle = workflows.start("greet", {"name": "ann"})
    with pytest.raises(TimeoutError):
        handle.result(timeout=0.05)


async def test_a_time_out_says_when_the_workflow_never_started():
    handle = await workflows.astart("greet", {"name": "ann"})
    with pytest.raises(TimeoutError) as caught:
        await handle.aresult(timeout=0.05)
    message = str(caught.value)
    assert "never started" in message
    assert "rivet_worker" in message and "EMBEDDED_WORKER" in message


def test_a_time_out_of_a_workflow_that_ran_says_where_it_is():
    with freeze_time():
        handle = workflows.start("approval", {})
        assert run_until_idle(handle) == "sleeping"
    with pytest.raises(TimeoutError) as caught:
        handle.result(timeout=0.05)
    assert "never started" not in str(caught.value)
    assert "(it is sleeping)" in str(caught.value)


def test_an_unknown_workflow_name_suggests_the_registered_one():
    with pytest.raises(WorkflowNotFound) as caught:
        workflows.start("Greet", {"name": "ann"})
    assert "did you mean 'greet'?" in caught.value.message


def test_a_cancelled_workflow_raises_a_cancelled_error():
    handle = workflows.start("approval", {})
    run_until_idle(handle)
    assert handle.cancel() is True
    with pytest.raises(WorkflowError) as info:
        handle.result()
    assert info.value.code == "cancelled"


# -- messages, wake, cancel ------------------------------------------------------------
def test_send_delivers_a_message_to_a_waiting_workflow():
    handle = workflows.start("approval", {}, id="approve-1")
    assert run_until_idle(handle) == "sleeping"
    row = Workflow.objects.get(pk="approve-1")
    assert row.waiting_for == ["approve"] and row.wake_at is None
    message_id = handle.send("approve", {"by": "ann"})
    assert WorkflowMessage.objects.filter(pk=message_id).exists()
    assert run_until_idle(handle) == "completed"
    assert handle.result() == {"approved_by": "ann"}
    assert not WorkflowMessage.objects.exists()  # consumed


def test_a_message_sent_before_the_wait_is_kept_for_it():
    handle = workflows.start("approval", {})
    handle.send("approve", {"by": "early"})
    assert run_until_idle(handle) == "completed"
    assert handle.result() == {"approved_by": "early"}


def test_messages_of_other_names_do_not_wake_the_workflow():
    handle = workflows.start("approval", {})
    run_until_idle(handle)
    handle.send("other", {"by": "x"})
    assert Workflow.objects.get(pk=handle.workflow_id).wake_at is None
    assert run_until_idle(handle) == "sleeping"


def test_a_message_wait_with_a_timeout_fails_on_the_virtual_clock():
    with freeze_time() as clock:
        handle = workflows.start("approval", {"timeout": 30})
        assert run_until_idle(handle) == "sleeping"
        clock.advance(29)
        assert run_until_idle(handle) == "sleeping"
        clock.advance(1)
        assert run_until_idle(handle) == "failed"
    assert handle.snapshot().error["name"] == "MessageTimeoutError"


def test_send_to_an_unknown_workflow_or_an_unstorable_body_is_refused():
    with pytest.raises(WorkflowNotFound):
        workflows.WorkflowHandle("nope", "approval").send("approve", {})
    handle = workflows.start("approval", {})
    with pytest.raises(TypeError):
        handle.send("approve", {"by": object()})
    assert not WorkflowMessage.objects.exists()


def test_wake_runs_a_sleeping_workflow_now():
    with freeze_time():
        handle = workflows.start("napper", {"seconds": 600})
        assert run_until_idle(handle) == "sleeping"
        assert run_until_idle(handle) == "sleeping"  # not due: nothing ran
        runs = Workflow.objects.get(pk=handle.workflow_id).run_count
        assert handle.wake() is True
        run_until_idle(handle)
        # It ran (and slept again: the recorded deadline wins on replay).
        assert Workflow.objects.get(pk=handle.workflow_id).run_count == runs + 1
        assert handle.status == "sleeping"


def test_cancel_stops_a_sleeping_workflow_for_good():
    handle = workflows.start("approval", {})
    run_until_idle(handle)
    assert handle.cancel() is True
    assert handle.status == "cancelled"
    assert handle.snapshot().state == "cancelled"
    with pytest.raises(WorkflowFinished):  # a late message: nothing to take it
        handle.send("approve", {"by": "late"})
    assert run_until_idle(handle) == "cancelled"
    assert handle.cancel() is False  # already finished


def test_cancel_of_a_running_workflow_fences_its_next_write_out():
    handle = workflows.start("rowWriter", {"steps": 3}, id="busy")
    lease = leases.claim("busy")  # another worker is running it
    assert handle.cancel() is True
    assert handle.status == "cancelled"
    assert Workflow.objects.get(pk="busy").cancel_requested
    from asgiref.sync import async_to_sync

    from django_rivet.workflows.driver import DjangoDriver, LeaseLost

    with pytest.raises(LeaseLost):
        async_to_sync(DjangoDriver("busy", lease_token=lease.token).set)(b"k", b"v")
    # The run that was fenced out lets go: the workflow stays cancelled and
    # the next run carries the cancel out.
    leases.release(lease, status=WorkflowStatus.SLEEPING)
    assert handle.status == "cancelled"
    assert run_until_idle(handle) == "cancelled"
    assert not Workflow.objects.get(pk="busy").cancel_requested
    assert not StepRow.objects.exists()


# -- recover, history, replay_from -----------------------------------------------------
def test_recover_reruns_the_failed_steps_only():
    handle = workflows.start("recoverable", {}, id="rec")
    assert run_until_idle(handle) == "failed"
    assert handle.recover() is True  # nothing changed: it fails again
    assert run_until_idle(handle) == "failed"
    StepRow.objects.create(workflow_id="rec", step="allow")
    assert handle.recover() is True
    assert handle.status == "sleeping"
    assert run_until_idle(handle) == "completed"
    assert handle.result() == "allowed"
    assert StepRow.objects.filter(step="first").count() == 1  # replayed, not rerun
    assert handle.recover() is False  # only failed workflows recover


def test_history_is_decoded_in_order():
    handle = workflows.start("napper", {"seconds": 0.0})
    run_until_idle(handle)
    history = handle.history()
    assert [(e.kind, e.location, e.status) for e in history] == [
        ("sleep", "nap", "completed"),
        ("step", "after", "completed"),
    ]
    assert history[1].output == "rested" and history[1].attempts == 1


def test_replay_from_a_step_runs_it_and_everything_after_again():
    handle = workflows.start("rowWriter", {"steps": 4}, id="replay")
    run_until_idle(handle)
    history = handle.history()
    remaining = handle.replay_from(history[2].id)
    assert [e.location for e in remaining] == ["s0", "s1"]
    assert handle.status == "sleeping"
    assert run_until_idle(handle) == "completed"
    counts = {
        step: StepRow.objects.filter(step=step).count()
        for step in ("s0", "s1", "s2", "s3")
    }
    assert counts == {"s0": 1, "s1": 1, "s2": 2, "s3": 2}


def test_replay_from_the_start_keeps_the_input():
    handle = workflows.start("greet", {"name": "ann"})
    run_until_idle(handle)
    assert handle.replay_from() == []
    assert run_until_idle(handle) == "completed"
    assert handle.result() == "hello ann"


def test_replay_refuses_unknown_entries_and_running_workflows():
    handle = workflows.start("greet", {"name": "ann"}, id="refuse")
    run_until_idle(handle)
    with pytest.raises(EntryNotFoundError):
        handle.replay_from("no-such-entry")
    lease = leases.claim("refuse", run=False)
    with pytest.raises(ReplayRefusedError):
        handle.replay_from()
    leases.release(lease)
    assert handle.status == "completed"


def test_a_rollback_runs_the_handlers_and_fails_the_workflow():
    handle = workflows.start("refunds", {}, id="refund")
    assert run_until_idle(handle) == "failed"
    assert list(StepRow.objects.values_list("step", flat=True)) == ["refund:ch_1"]


# -- actors and workflows --------------------------------------------------------------
class Shop(Actor):
    name = "workflowShop"
    initial_state = {"orders": 0}

    @action
    def order(self, ctx, order_id, fail=False):
        ctx.state["orders"] += 1
        handle = ctx.workflows.start("greet", {"name": order_id}, id=order_id)
        if fail:
            raise UserError("no stock")
        return handle.workflow_id

    @action
    async def aorder(self, ctx, order_id):
        handle = await ctx.workflows.astart("greet", {"name": order_id}, id=order_id)
        return handle.workflow_id


def test_an_action_starts_a_workflow_that_runs_after_commit():
    with register_temporarily(Shop):
        shop = actors.get_or_create("workflowShop", "main")
        assert shop.call("order", "o-1") == "o-1"
        assert shop.call("aorder", "o-2") == "o-2"
    for order_id in ("o-1", "o-2"):
        handle = workflows.get(order_id)
        assert run_until_idle(handle) == "completed"
        assert handle.result() == f"hello {order_id}"


def test_an_action_that_rolls_back_starts_nothing():
    with register_temporarily(Shop):
        shop = actors.get_or_create("workflowShop", "main")
        with pytest.raises(UserError):
            shop.call("order", "o-lost", True)
    assert not Workflow.objects.exists()
    with pytest.raises(WorkflowNotFound):
        workflows.get("o-lost")


def test_start_inside_a_transaction_that_rolls_back_starts_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        workflows.start("greet", {"name": "x"}, id="rolled")
        raise RuntimeError("abort")
    assert not Workflow.objects.filter(pk="rolled").exists()


def test_a_step_calls_an_actor_sync_and_async():
    handle = workflows.start("callsActor", {"key": "wf"})
    assert run_until_idle(handle) == "completed"
    assert handle.result() == [2, 5]
    assert actors.get("counter", "wf").call("getCount") == 5


# -- registry and discovery ------------------------------------------------------------
def test_workflows_py_of_installed_apps_is_discovered():
    found = registry.all_workflows()
    assert found["greet"] is test_workflows.greet
    assert found["rowWriter"] is test_workflows.row_writer


def test_duplicate_names_are_a_system_check_error(monkeypatch):
    @workflow(name="greet")
    async def impostor(ctx, input):
        return None

    monkeypatch.setattr(
        registry.definitions, "conflicts", [("greet", test_workflows.greet, impostor)]
    )
    errors = [e for e in checks.run_checks() if e.id == "rivet.E201"]
    assert [e.msg for e in errors] == [
        E201.format(
            name="greet",
            first=registry.describe(test_workflows.greet),
            second=registry.describe(impostor),
        )
    ]
    with pytest.raises(AlreadyRegistered):
        registry.register(impostor)


def test_discovery_records_conflicts_instead_of_raising(monkeypatch):
    import types

    @workflow(name="greet")
    async def impostor(ctx, input):
        return None

    module = types.ModuleType("tests.testapp.actors")
    module.impostor = impostor
    monkeypatch.setitem(__import__("sys").modules, "tests.testapp.actors", module)
    monkeypatch.setattr(registry.definitions, "conflicts", [])
    registry.discover()
    assert registry.definitions.conflicts == [("greet", test_workflows.greet, impostor)]
    assert registry.get("greet") is test_workflows.greet
