"""Run by tests/models/test_db.py in a pytest of its own (tests.settings.router).

django-rivet's models are routed to the ``rivet`` database; the ``default``
database has none of their tables. Every part of the runtime that runs raw
SQL or opens a transaction -- actor locks and state, KV, schedules and their
claims, queue delivery, the event log, workflow storage and leases -- must
use ``rivet``, and a failing call must roll back there.
"""

import pytest
from django.db import connections

from django_rivet import UserError, actors, workflows
from django_rivet.models import (
    Actor,
    ActorEvent,
    ActorKV,
    QueueMessage,
    Schedule,
    ScheduleStatus,
    Workflow,
    WorkflowKV,
)
from django_rivet.testing import freeze_time, run_due, run_until_idle
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "rivet"])


def test_the_default_database_has_no_runtime_tables():
    tables = connections["default"].introspection.table_names()
    assert not [name for name in tables if name.startswith("django_rivet_")]
    assert "django_rivet_actor" in connections["rivet"].introspection.table_names()


def test_actors_kv_events_and_rollbacks_use_the_routed_database():
    counter = actors.get_or_create("counter", "routed")
    assert counter.call("increment", 2) == 2
    assert ActorEvent.objects.filter(actor_id=counter.actor_id).count() == 1
    with pytest.raises(UserError):
        counter.call("add_note_then_fail", "x")
    # State and KV rolled back in the rivet database. (The Note lives in
    # the default database, outside that transaction: it stays.)
    assert counter.call("getCount") == 2
    assert not ActorKV.objects.exists()
    assert Note.objects.using("default").filter(text="x").exists()
    assert Actor.objects.count() == 1


def test_schedules_queues_and_workflows_use_the_routed_database():
    with freeze_time() as clock:
        alarm = actors.get_or_create("alarmClock", "routed")
        alarm.call("set_alarm", 30, "wake")
        assert Schedule.objects.count() == 1
        clock.advance(31)
        assert run_due() >= 1
        assert Schedule.objects.get().status == ScheduleStatus.DONE
    mailbox = actors.get_or_create("mailbox", "routed")
    assert mailbox.send("jobs", "hi")["status"] == "queued"
    assert QueueMessage.objects.count() == 1
    run_due()
    assert mailbox.call("seen") == ["hi"]
    handle = workflows.start("greet", {"name": "ann"})
    assert run_until_idle(handle) == "completed"
    assert handle.result() == "hello ann"
    assert Workflow.objects.count() == 1 and WorkflowKV.objects.exists()
