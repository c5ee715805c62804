"""Retention: the runtime's tables stay bounded, live work is never touched.

Everything runs on the virtual clock: a row is kept while it is exactly as old
as its retention period and deleted one second later.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.apps import apps
from django.core.management import call_command
from django.test import override_settings

from django_rivet import Actor, action, actors, queue_handler, workflows
from django_rivet.actors.connections import Connect
from django_rivet.actors.rows import ActorRef
from django_rivet.actors.spine import invoke
from django_rivet.exceptions import WorkflowNotFound
from django_rivet.models import (
    CronJob,
    CronRun,
    QueueMessage,
    Schedule,
    Workflow,
    WorkflowKV,
    WorkflowMessage,
    WorkflowStreamValue,
)
from django_rivet.testing import (
    freeze_time,
    register_temporarily,
    run_due,
    run_until_idle,
)
from django_rivet.upkeep import retention, sweeper
from tests.support.clock import START

# pg: the PostgreSQL leg runs this module (window functions and SKIP LOCKED deletes).
pytestmark = [pytest.mark.pg, pytest.mark.django_db]

HOUR = 3600
YEAR = 365 * 86400


def sweep_purge():
    """Run the sweep step alone (the whole sweep would also fire due work)."""
    return sweeper.purge_finished()


def rivet(**settings):
    return override_settings(RIVET=settings)


def finished_workflow(workflow_id, message=None):
    """A completed workflow, with ``message`` left unreceived in its inbox."""
    if not message:
        handle = workflows.start("greet", {"name": workflow_id}, id=workflow_id)
        assert run_until_idle(handle) == "completed"
        return handle
    # Sent while it ran, never received (a finished one refuses messages).
    handle = workflows.start("approval", {}, id=workflow_id)
    run_until_idle(handle)
    handle.send(message, {"late": True})
    handle.send("approve", {"by": "ann"})
    assert run_until_idle(handle) == "completed"
    return handle


# -- WORKFLOW_RETENTION ----------------------------------------------------------------
@rivet(WORKFLOW_RETENTION=HOUR)
def test_a_finished_workflow_is_kept_for_its_retention_then_purged_whole():
    with freeze_time(START) as clock:
        finished_workflow("done", message="late")
        assert WorkflowKV.objects.filter(workflow_id="done").exists()
        assert WorkflowMessage.objects.filter(workflow_id="done").exists()
        clock.advance(HOUR)
        assert sweeper.sweep()["purge_finished"] == 0
        assert workflows.get("done").result() == {"approved_by": "ann"}
        clock.advance(1)
        assert sweeper.sweep()["purge_finished"] > 0
    assert not Workflow.objects.filter(pk="done").exists()
    assert not WorkflowKV.objects.filter(workflow_id="done").exists()
    assert not WorkflowMessage.objects.filter(workflow_id="done").exists()


@pytest.mark.parametrize("status", ["failed", "cancelled"])
@rivet(WORKFLOW_RETENTION=HOUR)
def test_failed_and_cancelled_workflows_are_purged_too(status):
    with freeze_time(START) as clock:
        if status == "failed":
            handle = workflows.start("doomed", id="ended")
            assert run_until_idle(handle) == "failed"
        else:
            handle = workflows.start("approval", {}, id="ended")
            assert run_until_idle(handle) == "sleeping"
            assert handle.cancel() is True
        clock.advance(HOUR)
        assert retention.purge_all() == {}
        clock.advance(1)
        assert retention.purge_all()["Workflow"] == 1
    assert not WorkflowKV.objects.exists()


@rivet(WORKFLOW_RETENTION=None)
def test_workflow_retention_none_keeps_finished_workflows_forever():
    with freeze_time(START) as clock:
        finished_workflow("kept")
        clock.advance(50 * YEAR)
        assert sweep_purge() == 0
        assert retention.purge_all() == {}
        assert retention.eligible_counts()["Workflow"] == 0
    assert workflows.get("kept").result() == "hello kept"


@rivet(WORKFLOW_RETENTION=timedelta(minutes=5))
def test_a_purged_workflow_id_can_be_started_again_as_a_new_workflow():
    with freeze_time(START) as clock:
        finished_workflow("order-42")
        clock.advance(301)
        retention.purge_all()
        with pytest.raises(WorkflowNotFound):
            workflows.get("order-42")
        # Under another workflow name, even: the id is free again.
        handle = workflows.start("napper", {"seconds": 10}, id="order-42")
        assert handle.status == "pending"
        assert run_until_idle(handle) == "sleeping"
        clock.advance(10)
        assert run_until_idle(handle) == "completed"
    assert handle.result() == "rested"
    assert [entry.kind for entry in handle.history()] == ["sleep", "step"]


# -- SCHEDULE_RETENTION and QUEUE_RETENTION --------------------------------------------
@rivet(SCHEDULE_RETENTION=600, QUEUE_RETENTION=900)
def test_fired_schedules_and_processed_messages_are_kept_for_their_retention():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "retention")
        alarm.call("set_alarm", 1, "fired")
        box = actors.get_or_create("mailbox", "retention")
        box.send("jobs", "processed")
        clock.advance(1)
        assert run_due() == 2  # both finish at START + 1
        clock.advance(600)
        assert sweep_purge() == 0
        clock.advance(1)
        assert sweep_purge() == 1
        assert not Schedule.objects.exists()
        assert QueueMessage.objects.get().status == "done"
        clock.advance(299)
        assert sweep_purge() == 0
        clock.advance(1)
        assert sweep_purge() == 1
    assert not QueueMessage.objects.exists()


@rivet(SCHEDULE_RETENTION=None, QUEUE_RETENTION=None, SCHEDULE_MAX_RETRIES=0)
def test_schedule_and_queue_retention_none_keep_rows_forever():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "forever")
        alarm.call("schedule_call", 1, "boom")  # a failure is kept too
        box = actors.get_or_create("mailbox", "forever")
        box.send("jobs", "fail")
        clock.advance(1)
        run_due()
        clock.advance(50 * YEAR)
        assert sweep_purge() == 0
        assert retention.purge_all() == {}
    assert Schedule.objects.get().status == "failed"
    assert QueueMessage.objects.get().status == "failed"


# -- CRON_HISTORY ----------------------------------------------------------------------
def tick(clock, times):
    for _ in range(times):
        clock.advance(10)
        run_due()


def history_length(alarm, name):
    return len(alarm.call("cron_history", name, 100))


@rivet(CRON_HISTORY=3)
def test_cron_history_keeps_the_newest_runs_per_job():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "history")
        alarm.call("set_every", "tick", 10)
        assert alarm.call("cron_job", "tick")["max_history"] == 3
        tick(clock, 3)
        assert history_length(alarm, "tick") == 3
        tick(clock, 1)
        runs = alarm.call("cron_history", "tick", 100)
    assert len(runs) == 3
    # The oldest run went, the newest three stay.
    assert runs[-1]["scheduled_at"] == START + timedelta(seconds=20)
    assert runs[0]["scheduled_at"] == START + timedelta(seconds=40)


@rivet(CRON_HISTORY=None)
def test_cron_history_none_keeps_every_run_and_max_history_still_applies():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "all-runs")
        alarm.call("set_every", "all", 10)
        alarm.call("set_every_history", "two", 10, 2)
        tick(clock, 5)
        assert history_length(alarm, "all") == 5
        assert history_length(alarm, "two") == 2
        assert retention.purge_all() == {}


def test_lowering_cron_history_is_applied_by_rivet_purge(capsys):
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "lowered")
        alarm.call("set_every", "follows", 10)
        alarm.call("set_every_history", "own", 10, 4)
        tick(clock, 4)
        with rivet(CRON_HISTORY=1):
            assert retention.eligible_counts()["CronRun"] == 3
            call_command("rivet_purge")
            assert history_length(alarm, "follows") == 1
    # A job with its own max_history keeps it.
    assert history_length(alarm, "own") == 4
    assert "CronRun: 3" in capsys.readouterr().out


# -- live work, batches, the command ---------------------------------------------------
@rivet(WORKFLOW_RETENTION=0, SCHEDULE_RETENTION=0, QUEUE_RETENTION=0, CRON_HISTORY=0)
def test_live_work_is_never_purged_whatever_its_age():
    with freeze_time(START) as clock:
        pending = workflows.start("greet", {"name": "x"}, id="pending")
        sleeping = workflows.start("napper", {"seconds": 100 * YEAR}, id="sleeping")
        waiting = workflows.start("approval", {}, id="waiting")
        assert run_until_idle(sleeping) == "sleeping"
        assert run_until_idle(waiting) == "sleeping"
        waiting.send("unrelated")
        alarm = actors.get_or_create("alarmClock", "live")
        alarm.call("set_alarm", 90 * YEAR, "far away")
        alarm.call("set_every", "yearly", YEAR)
        box = actors.get_or_create("mailbox", "live")
        invoke_later = [box.send("jobs", f"waiting {n}") for n in range(2)]
        assert invoke_later == [{"status": "queued"}] * 2
        clock.advance(50 * YEAR)
        assert sweep_purge() == 0
        assert retention.purge_all() == {}
    assert {row.pk: row.status for row in Workflow.objects.all()} == {
        "pending": "pending",
        "sleeping": "sleeping",
        "waiting": "sleeping",
    }
    assert pending.snapshot().input == {"name": "x"}
    assert WorkflowMessage.objects.filter(workflow_id="waiting").count() == 1
    assert Schedule.objects.get().status == "pending"
    assert CronJob.objects.get().name == "yearly"
    assert list(QueueMessage.objects.values_list("status", flat=True)) == [
        "pending",
        "pending",
    ]


@rivet(WORKFLOW_RETENTION=0)
def test_a_finished_workflow_held_by_an_operation_is_not_purged():
    from django_rivet.workflows import leases

    with freeze_time(START) as clock:
        handle = workflows.start("doomed", id="held")
        assert run_until_idle(handle) == "failed"
        clock.advance(1)
        lease = leases.claim("held", run=False)  # what recover() does first
        assert lease is not None
        assert retention.purge_all() == {}
        leases.release(lease)
        assert retention.purge_all()["Workflow"] == 1


@rivet(WORKFLOW_RETENTION=0, SCHEDULE_RETENTION=0, QUEUE_RETENTION=0)
def test_each_sweep_purges_at_most_one_batch_per_table(monkeypatch):
    monkeypatch.setattr(sweeper, "STEP_BATCH", 3)
    with freeze_time(START) as clock:
        for n in range(5):
            finished_workflow(f"wf-{n}")
            clock.advance(1)
        alarm = actors.get_or_create("alarmClock", "batches")
        box = actors.get_or_create("mailbox", "batches")
        for n in range(5):
            alarm.call("set_alarm", 1, f"alarm {n}")
            box.send("jobs", n)
        clock.advance(1)
        run_due()
        clock.advance(1)
        counts = [sweep_purge()]
        # The oldest workflows went first.
        assert set(Workflow.objects.values_list("pk", flat=True)) == {"wf-3", "wf-4"}
        assert Schedule.objects.count() == QueueMessage.objects.count() == 2
        counts += [sweep_purge(), sweep_purge()]
    assert counts[1] > 0 and counts[2] == 0
    assert not Workflow.objects.exists() and not WorkflowKV.objects.exists()
    assert not Schedule.objects.exists() and not QueueMessage.objects.exists()


@rivet(WORKFLOW_RETENTION=HOUR, SCHEDULE_RETENTION=HOUR, QUEUE_RETENTION=HOUR)
def test_rivet_purge_dry_run_prints_counts_per_table_and_deletes_nothing(capsys):
    with freeze_time(START) as clock:
        finished_workflow("a", message="note")
        finished_workflow("b")
        streamed = workflows.start("streamer", {"count": 3}, id="c")
        assert run_until_idle(streamed) == "completed"
        alarm = actors.get_or_create("alarmClock", "dry")
        alarm.call("set_alarm", 1, "fired")
        clock.advance(1)
        run_due()
        clock.advance(HOUR + 1)
        kv_rows = WorkflowKV.objects.count()
        call_command("rivet_purge", "--dry-run")
        dry = capsys.readouterr().out
        assert Workflow.objects.count() == 3 and Schedule.objects.count() == 1
        call_command("rivet_purge", "--batch-size", "1")
        done = capsys.readouterr().out
    expected = [
        "Workflow: 3",
        f"WorkflowKV: {kv_rows}",
        "WorkflowMessage: 1",
        "WorkflowStream: 1",
        "WorkflowStreamValue: 3",
        "WorkflowAttribute: 0",
        "WorkflowMessageKey: 0",
        "Schedule: 1",
        "QueueMessage: 0",
        "CronRun: 0",
    ]
    assert dry.splitlines() == ["Dry run: nothing deleted. Eligible rows:", *expected]
    assert done.splitlines() == ["Deleted rows:", *expected]
    assert not Workflow.objects.exists() and not WorkflowKV.objects.exists()
    assert not Schedule.objects.exists() and not WorkflowStreamValue.objects.exists()


# -- destroyed actors ------------------------------------------------------------------
class Hoarder(Actor):
    """Owns a row in every table an actor can own rows in."""

    name = "hoarder"
    initial_state = {"jobs": []}

    @action
    def fill(self, ctx):
        ctx.kv.put("k", "v")
        ctx.broadcast("filled", 1)
        ctx.schedule.after(1, "noop")
        ctx.schedule.after(YEAR, "noop")
        ctx.cron.every("tick", 10, "noop")
        ctx.queue.send("jobs", "handled")

    @action
    def queue_more(self, ctx):
        ctx.queue.send("jobs", "pending")

    @action
    def noop(self, ctx):
        return None

    @queue_handler("jobs")
    def on_job(self, ctx, message):
        ctx.state["jobs"].append(message)
        return "ok"

    @action
    def destroy(self, ctx):
        ctx.destroy()


def test_a_destroyed_actor_leaves_no_row_in_any_table():
    with register_temporarily(Hoarder), freeze_time(START) as clock:
        hoarder = actors.create("hoarder", "full")
        hoarder.call("fill")
        clock.advance(10)
        run_due()
        hoarder.call("queue_more")
        invoke(
            ActorRef(actor_id=hoarder.actor_id),
            Connect(params=None, channel_name="test.channel", server_id="test"),
        )
        rivet_models = list(apps.get_app_config("django_rivet").get_models())
        filled = {m.__name__ for m in rivet_models if m.objects.exists()}
        assert filled >= {
            "Actor",
            "ActorKV",
            "ActorEvent",
            "Connection",
            "Schedule",
            "CronJob",
            "CronRun",
            "QueueMessage",
        }
        assert set(Schedule.objects.values_list("status", flat=True)) == {
            "done",
            "pending",
        }
        assert set(QueueMessage.objects.values_list("status", flat=True)) == {
            "done",
            "pending",
        }
        hoarder.call("destroy")
    assert {m.__name__: m.objects.count() for m in rivet_models} == {
        m.__name__: 0 for m in rivet_models
    }
    assert not CronRun.objects.exists()
