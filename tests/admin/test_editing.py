"""Editing an actor's state and KV in the admin: invocations, logged, permissioned."""

import json
import threading
import uuid
from datetime import UTC, datetime

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse

from django_rivet import Actor, action, actors
from django_rivet.actors.kv import ActorKVStore
from django_rivet.models import Actor as ActorRow
from django_rivet.models import ActorEvent, ActorKV
from django_rivet.testing import register_temporarily
from tests.support.admin import log_in_staff
from tests.support.threads import closing

pytestmark = pytest.mark.django_db(transaction=True)

EDITOR = ("view_actor", "change_actor", "view_actorkv", "change_actorkv",
          "add_actorkv", "delete_actorkv")  # fmt: skip


class Ledger(Actor):
    """State with every kind JSON lacks, and a write that can hold the lock."""

    name = "editLedger"
    writing = threading.Event()
    release = threading.Event()

    def create_state(self, ctx, input):
        return {
            "total": 1,
            "blob": b"\x00\xff",
            "at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
            "ref": uuid.UUID(int=7),
        }

    def on_state_change(self, ctx, state):
        state["changes"] = state.get("changes", 0) + 1

    @action
    def hold(self, ctx):
        ctx.state["total"] += 1
        self.writing.set()
        assert self.release.wait(30)


@pytest.fixture
def ledger():
    Ledger.writing.clear()
    Ledger.release.clear()
    with register_temporarily(Ledger):
        yield actors.get_or_create("editLedger", "l")


def change_url(handle):
    return reverse("admin:django_rivet_actor_change", args=[handle.actor_id])


def form_state(client, handle):
    page = client.get(change_url(handle))
    assert page.status_code == 200
    form = page.context["adminform"].form
    return json.loads(form["state_json"].value()), form["edited_version"].value()


def post_state(client, handle, state, version):
    return client.post(
        change_url(handle),
        {"state_json": json.dumps(state), "edited_version": version},
    )


def row(handle):
    return ActorRow.objects.get(pk=handle.actor_id)


def test_an_editor_changes_the_state_as_an_invocation_and_it_is_logged(client, ledger):
    editor = log_in_staff(client, *EDITOR, username="editor")
    shown, version = form_state(editor, ledger)
    # Types JSON has not are shown tagged, and come back as they were.
    assert shown["blob"] == {"$bytes": "AP8="}
    assert shown["at"] == {"$datetime": "2026-01-02T03:04:05+00:00"}
    before = row(ledger)
    shown["total"] = 42
    response = post_state(editor, ledger, shown, version)
    assert response.status_code == 302, response.content.decode()[-2000:]
    after = row(ledger)
    state = after.decoded_state()
    assert state["total"] == 42
    assert state["blob"] == b"\x00\xff" and state["ref"] == uuid.UUID(int=7)
    assert state["at"] == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    # An invocation wrote it: on_state_change ran, the version moved by one.
    assert state["changes"] == before.decoded_state().get("changes", 0) + 1
    assert after.version == before.version + 1
    # Nothing else moved: no event, no seq.
    assert after.event_seq == before.event_seq
    assert not ActorEvent.objects.exists()
    entry = LogEntry.objects.get(object_id=str(ledger.actor_id))
    assert entry.user.username == "editor" and entry.is_change()
    assert '"total": 1' in entry.change_message
    assert '"total": 42' in entry.change_message


@pytest.mark.pg  # the wait for the actor's lock is each database's own
def test_an_edit_waits_for_the_lock_and_refuses_a_stale_version(client, ledger):
    editor = log_in_staff(client, *EDITOR, username="editor")
    shown, version = form_state(editor, ledger)
    shown["total"] = 99
    outcome = {}

    def edit():
        outcome["response"] = post_state(editor, ledger, shown, version)

    writer = threading.Thread(target=closing(ledger.call), args=("hold",))
    writer.start()
    assert Ledger.writing.wait(30)
    admin = threading.Thread(target=closing(edit))
    admin.start()
    Ledger.release.set()
    writer.join(30)
    admin.join(30)
    # The edit ran after the write committed (one at a time): it found the
    # version the page was opened at gone, and said so.
    page = outcome["response"]
    assert page.status_code == 200
    assert "changed since this page was opened" in page.content.decode()
    assert row(ledger).decoded_state()["total"] == 2
    assert not LogEntry.objects.exists()


def test_edits_run_in_their_own_transaction_not_in_the_view_s(
    client, ledger, monkeypatch
):
    # Inside Django's view transaction, which had read the page's rows,
    # SQLite could not start writing once another writer had committed: the
    # edit failed as actor/busy instead of waiting for the actor's lock.
    from django.db import connection

    from django_rivet.admin import editing

    outer = []

    def recording(*args, **kwargs):
        outer.append(connection.in_atomic_block)
        return invoke(*args, **kwargs)

    invoke = editing.invoke
    monkeypatch.setattr(editing, "invoke", recording)
    editor = log_in_staff(client, *EDITOR, username="editor")
    shown, version = form_state(editor, ledger)
    shown["total"] = 5
    assert post_state(editor, ledger, shown, version).status_code == 302
    ActorKVStore(ledger.actor_id).put("note", "x")
    entry = ActorKV.objects.get()
    delete = reverse("admin:django_rivet_actorkv_delete", args=[entry.pk])
    assert editor.post(delete, {"post": "yes"}).status_code == 302
    assert outer == [False, False]
    assert row(ledger).decoded_state()["total"] == 5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "Not valid JSON"),
        ('{"total": 1e400}', "Outside the value domain"),
        ('{"total": 36893488147419103232}', "Outside the value domain"),
        ('{"blob": {"$bytes": "%%%"}}', "not a valid bytes"),
        ("[1, 2]", "cannot become a list"),
    ],
)
def test_a_refused_value_is_a_form_error_and_changes_nothing(
    client, ledger, text, message
):
    editor = log_in_staff(client, *EDITOR, username="editor")
    _, version = form_state(editor, ledger)
    before = row(ledger)
    page = editor.post(
        change_url(ledger), {"state_json": text, "edited_version": version}
    )
    assert page.status_code == 200
    assert message in page.content.decode()
    assert row(ledger).version == before.version
    assert not LogEntry.objects.exists()


def test_without_the_change_permission_an_edit_is_forbidden(client, ledger):
    viewer = log_in_staff(client, "view_actor", username="viewer")
    page = viewer.get(change_url(ledger))
    assert page.status_code == 200 and "state_json" not in page.content.decode()
    before = row(ledger)
    response = post_state(viewer, ledger, {"total": 5}, before.version)
    assert response.status_code == 403
    assert row(ledger).decoded_state()["total"] == 1
    assert not LogEntry.objects.exists()


def test_kv_entries_are_edited_added_and_deleted_through_invocations(client):
    handle = actors.get_or_create("counter", "kv")
    ActorKVStore(handle.actor_id).put("profile", {"name": "Ann"})
    editor = log_in_staff(client, *EDITOR, username="editor")
    entry = ActorKV.objects.get()
    url = reverse("admin:django_rivet_actorkv_change", args=[entry.pk])
    response = editor.post(url, {"value_json": '{"name": "Bob"}'})
    assert response.status_code == 302, response.content.decode()[-2000:]
    assert ActorKVStore(handle.actor_id).get("profile") == {"name": "Bob"}
    added = editor.post(
        reverse("admin:django_rivet_actorkv_add"),
        {"actor": str(handle.actor_id), "key_text": "plan", "value_json": '"pro"'},
    )
    assert added.status_code == 302, added.content.decode()[-2000:]
    assert ActorKVStore(handle.actor_id).get("plan") == "pro"
    refused = editor.post(url, {"value_json": '{"n": 1e999}'})
    assert "Outside the value domain" in refused.content.decode()
    delete = reverse("admin:django_rivet_actorkv_delete", args=[entry.pk])
    assert editor.post(delete, {"post": "yes"}).status_code == 302
    assert ActorKVStore(handle.actor_id).get("profile") is None
    # The quota's accounting followed (the runtime's KV store did the writes).
    assert row(handle).kv_size == len(b"plan") + len(ActorKV.objects.get().value)
    assert LogEntry.objects.filter(user__username="editor").count() == 3
    viewer = log_in_staff(Client(), "view_actorkv", username="viewer")
    # The entry that is left ("profile"'s row is deleted: Django 6 answers a
    # missing object with a redirect before it checks permissions).
    remaining = reverse(
        "admin:django_rivet_actorkv_change", args=[ActorKV.objects.get().pk]
    )
    assert viewer.post(remaining, {"value_json": "1"}).status_code == 403
    assert ActorKVStore(handle.actor_id).get("plan") == "pro"
