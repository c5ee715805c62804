"""The admin inspector: read-only, decoded, staff only, actions via the runtime."""

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from django_rivet import actors
from django_rivet.actors.kv import ActorKVStore
from django_rivet.models import Actor as ActorRow

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def counter():
    handle = actors.get_or_create("counter", ["acme", "admin"])
    handle.call("increment", 41)
    ActorKVStore(handle.actor_id).put("profile", {"name": "Ann"})
    ActorKVStore(handle.actor_id).put(b"\xff\x00", b"raw", codec="raw")
    return handle


@pytest.fixture
def viewer(client):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="django_rivet", codename__startswith="view_"
        )
    )
    client.force_login(user)
    return client


def test_staff_sees_state_decoded_as_json(viewer, counter):
    url = reverse("admin:django_rivet_actor_change", args=[counter.actor_id])
    page = viewer.get(url).content.decode()
    assert "&quot;count&quot;: 41" in page
    assert "acme" in page


def test_kv_values_and_binary_keys_are_shown(viewer, counter):
    page = viewer.get(reverse("admin:django_rivet_actorkv_changelist")).content.decode()
    assert "profile" in page
    assert "0xff00" in page


def test_runtime_records_are_read_only(viewer, counter):
    assert viewer.get(reverse("admin:django_rivet_actor_add")).status_code == 403
    url = reverse("admin:django_rivet_actor_change", args=[counter.actor_id])
    viewer.post(url, {"name": "hacked"})
    assert ActorRow.objects.get(pk=counter.actor_id).name == "counter"
    delete = reverse("admin:django_rivet_actor_delete", args=[counter.actor_id])
    assert viewer.post(delete, {"post": "yes"}).status_code == 403
    assert ActorRow.objects.filter(pk=counter.actor_id).exists()


def test_non_staff_users_are_sent_to_login(client, counter):
    user = User.objects.create_user("plain", password="pw")
    client.force_login(user)
    response = client.get(reverse("admin:django_rivet_actor_changelist"))
    assert response.status_code == 302
    assert "/login/" in response["Location"]


def test_destroy_action_goes_through_the_runtime(client, counter):
    admin_user = User.objects.create_superuser("root", password="pw")
    client.force_login(admin_user)
    response = client.post(
        reverse("admin:django_rivet_actor_changelist"),
        {"action": "destroy_actors", "_selected_action": [str(counter.actor_id)]},
        follow=True,
    )
    assert "Destroyed 1 actor(s)." in response.content.decode()
    assert not ActorRow.objects.exists()


def test_viewers_cannot_destroy(viewer, counter):
    viewer.post(
        reverse("admin:django_rivet_actor_changelist"),
        {"action": "destroy_actors", "_selected_action": [str(counter.actor_id)]},
    )
    assert ActorRow.objects.filter(pk=counter.actor_id).exists()


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
