"""The admin for schedules, cron jobs and queue messages.

Decoded arguments and histories; failed work with its traceback and "Retry
now"; "Fire now" through the scheduler. Every action is permission-checked.
"""

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from django_rivet import actors
from django_rivet.models import Actor as ActorRow
from django_rivet.models import (
    QueueMessage,
    QueueMessageStatus,
    Schedule,
    ScheduleStatus,
)
from django_rivet.testing import freeze_time, run_due
from tests.support.admin import act
from tests.support.clock import START

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def no_retries(settings):
    settings.RIVET = {"SCHEDULE_MAX_RETRIES": 0}


def failed_work():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "admin-failed")
        schedule_id = alarm.call("schedule_call", 1, "boom")
        box = actors.get_or_create("mailbox", "admin-failed")
        box.send("jobs", "crash")
        clock.advance(1)
        run_due()
    return schedule_id, QueueMessage.objects.get().pk


def test_failed_schedules_show_their_error_and_traceback_and_can_be_retried(root):
    schedule_id, _ = failed_work()
    listing = root.get(
        reverse("admin:django_rivet_schedule_changelist") + "?status__exact=failed"
    ).content.decode()
    assert "RuntimeError: boom on purpose" in listing
    page = root.get(
        reverse("admin:django_rivet_schedule_change", args=[schedule_id])
    ).content.decode()
    assert "<pre>Traceback (most recent call last):" in page
    response = act(root, "schedule", "retry_now", [schedule_id])
    assert "Retrying 1; 0 not failed." in response.content.decode()
    row = Schedule.objects.get(pk=schedule_id)
    assert (row.status, row.attempts, row.traceback) == (ScheduleStatus.PENDING, 0, "")


def test_failed_messages_show_their_traceback_and_can_be_retried(root):
    _, message_id = failed_work()
    page = root.get(
        reverse("admin:django_rivet_queuemessage_change", args=[message_id])
    ).content.decode()
    assert "RuntimeError: secret detail" in page  # the detail, server-side only
    assert "<pre>Traceback" in page
    response = act(root, "queuemessage", "retry_now", [message_id])
    assert "Retrying 1; 0 not failed." in response.content.decode()
    assert QueueMessage.objects.get().status == QueueMessageStatus.PENDING


def test_viewers_see_failed_work_but_cannot_retry_it(viewer):
    schedule_id, message_id = failed_work()
    act(viewer, "schedule", "retry_now", [schedule_id])
    act(viewer, "queuemessage", "retry_now", [message_id])
    assert Schedule.objects.get().status == ScheduleStatus.FAILED
    assert QueueMessage.objects.get().status == QueueMessageStatus.FAILED


# -- schedules, cron and queues ---------------------------------------------------
def state_of(handle):
    return ActorRow.objects.get(pk=handle.actor_id).decoded_state()


def test_fire_now_fires_a_pending_schedule_through_the_scheduler(client):
    alarm = actors.get_or_create("alarmClock", "admin")
    schedule_id = alarm.call("set_alarm", 3600, "early")
    client.force_login(User.objects.create_superuser("root", password="pw"))
    response = client.post(
        reverse("admin:django_rivet_schedule_changelist"),
        {"action": "fire_now", "_selected_action": [schedule_id]},
        follow=True,
    )
    assert "Fired: 1 ok; 0 not pending." in response.content.decode()
    assert [ring["label"] for ring in state_of(alarm)["rings"]] == ["early"]
    # Fired once: a second attempt finds nothing pending.
    response = client.post(
        reverse("admin:django_rivet_schedule_changelist"),
        {"action": "fire_now", "_selected_action": [schedule_id]},
        follow=True,
    )
    assert "Fired: nothing; 1 not pending." in response.content.decode()
    assert len(state_of(alarm)["rings"]) == 1


def test_viewers_see_schedules_decoded_but_cannot_fire_them(viewer):
    alarm = actors.get_or_create("alarmClock", "admin")
    schedule_id = alarm.call("set_alarm", 3600, "label-in-args")
    page = viewer.get(
        reverse("admin:django_rivet_schedule_change", args=[schedule_id])
    ).content.decode()
    assert "label-in-args" in page
    viewer.post(
        reverse("admin:django_rivet_schedule_changelist"),
        {"action": "fire_now", "_selected_action": [schedule_id]},
    )
    assert state_of(alarm)["rings"] == []


def test_cron_job_page_shows_its_history(viewer):
    from django_rivet.models import CronJob
    from django_rivet.testing import freeze_time, run_due

    with freeze_time() as clock:
        alarm = actors.get_or_create("alarmClock", "admin")
        alarm.call("set_every", "tick", 60)
        clock.advance(60)
        assert run_due() == 1
    job = CronJob.objects.get()
    listing = viewer.get(reverse("admin:django_rivet_cronjob_changelist"))
    assert "every 60 s" in listing.content.decode()
    page = viewer.get(reverse("admin:django_rivet_cronjob_change", args=[job.pk]))
    assert "<td>ok</td>" in page.content.decode()


def test_queue_messages_are_shown_decoded(viewer):
    box = actors.get_or_create("mailbox", "admin")
    box.send("jobs", {"task": "resize"})
    page = viewer.get(reverse("admin:django_rivet_queuemessage_changelist"))
    assert page.status_code == 200
    from django_rivet.models import QueueMessage

    message = QueueMessage.objects.get()
    detail = viewer.get(
        reverse("admin:django_rivet_queuemessage_change", args=[message.pk])
    ).content.decode()
    assert "&quot;task&quot;: &quot;resize&quot;" in detail
