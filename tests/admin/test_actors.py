"""The admin inspector for actors: read-only, decoded, staff only, runtime actions."""

import pytest
from django.contrib.auth.models import User
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


def test_the_state_version_is_shown_and_the_admin_migrates_it(root):
    from django_rivet.testing import register_temporarily
    from tests.actors.test_states import CartV2, old_cart

    behind = old_cart("admin")
    with register_temporarily(CartV2):
        changelist = reverse("admin:django_rivet_actor_changelist")
        page = root.get(changelist).content.decode()
        assert "1 (code: 2; migrates on next load)" in page
        response = root.post(
            changelist,
            {"action": "migrate_states", "_selected_action": [str(behind.actor_id)]},
            follow=True,
        )
        assert "Migrated the state of 1 actor(s)." in response.content.decode()
        assert ActorRow.objects.get(pk=behind.actor_id).state_version == 2
        url = reverse("admin:django_rivet_actor_change", args=[behind.actor_id])
        assert "&quot;total&quot;: &quot;3.75&quot;" in root.get(url).content.decode()
