"""The smaller findings of issue 25: keys, inboxes, logs, terminals, class names.

Each test fails on the code before the issue (checked against its tree).
"""

from __future__ import annotations

import json
import logging
from io import StringIO

import pytest
from channels.testing import WebsocketCommunicator
from django.core.management import call_command
from django.test import Client

from django_rivet import WorkflowInboxFull, actors, workflows
from django_rivet.exceptions import InvalidKey
from django_rivet.models import Actor, WorkflowMessage
from django_rivet.testing import (
    RivetCommunicator,
    run_until_idle,
    websocket_application,
)
from django_rivet.workflows import operations as workflow_operations

# pg: the PostgreSQL leg runs this module (keys, inboxes and query strings
# as each database stores them).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


def post(path, body="{}", **extra):
    return Client().post(path, body, content_type="application/json", **extra)


# -- keys ------------------------------------------------------------------------------
def test_empty_key_parts_count_against_the_key_size_limit():
    with pytest.raises(InvalidKey):
        actors.get_or_create("counter", [""] * 2000)
    # Over HTTP, 2,000 parameters are refused as such (a 500 before).
    query = "&".join(["key="] * 2000)
    response = post(f"/rivet/actors/counter/actions/increment?{query}")
    assert (response.status_code, response.json()["code"]) == (400, "malformed")
    # A key of many empty parts within the limit is still a key.
    assert actors.get_or_create("counter", [""] * 100).call("getCount") == 0
    assert not Actor.objects.filter(key__startswith='["",""' + ',""' * 1000).exists()


@pytest.mark.parametrize(
    "route",
    [
        "/rivet/actors/counter/actions/increment?key={}",
        "/rivet/gateway/counter/action/increment?rvt-method=getOrCreate&rvt-key={}",
    ],
)
def test_keys_that_are_not_utf8_are_refused_not_collapsed_into_one(route):
    answers = [
        post(route.format(key), '{"args": []}', headers={"x-rivet-encoding": "json"})
        for key in ("%FF", "%FE")
    ]
    assert [(a.status_code, a.json()["code"]) for a in answers] == [
        (400, "malformed"),
        (400, "malformed"),
    ]
    assert not Actor.objects.filter(name="counter").exists()


async def test_a_websocket_key_of_many_empty_parts_is_refused():
    comm = RivetCommunicator("counter", ["x"])
    comm.scope["query_string"] = ("&".join(["key="] * 2000) + "&encoding=json").encode()
    connected, _ = await comm.connect()
    assert connected
    frame = await comm.receive_frame()
    # Past DATA_UPLOAD_MAX_NUMBER_FIELDS, as over HTTP (main created the actor).
    assert (frame["type"], frame["code"]) == ("error", "malformed")
    await comm.disconnect()
    assert not await Actor.objects.filter(name="counter").aexists()


async def test_a_websocket_key_that_is_not_utf8_is_refused():
    comm = RivetCommunicator("counter", ["x"])
    comm.scope["query_string"] = b"key=%FF&encoding=json"
    connected, _ = await comm.connect()
    assert connected
    frame = await comm.receive_frame()
    assert (frame["type"], frame["code"]) == ("error", "malformed")
    await comm.disconnect()


async def test_a_rivetkit_websocket_key_that_is_not_utf8_is_refused():
    answers = []
    for key in ("%FF", "%FE"):
        comm = WebsocketCommunicator(
            websocket_application("rivet/"),
            f"/rivet/gateway/counter/connect?rvt-method=getOrCreate&rvt-key={key}",
            subprotocols=["rivet", "rivet_encoding.json"],
        )
        connected, _ = await comm.connect(10)
        assert connected
        error = json.loads(await comm.receive_from(10))["body"]
        answers.append((error["tag"], error["val"]["code"]))
        await comm.disconnect()
    assert answers == [("Error", "malformed")] * 2
    assert not await Actor.objects.filter(name="counter").aexists()


# -- workflow inboxes ------------------------------------------------------------------
def test_a_workflow_inbox_is_bounded(monkeypatch):
    monkeypatch.setattr(workflow_operations, "MAX_INBOX_MESSAGES", 5)
    handle = workflows.start("approval", {}, id="inbox-bound")
    run_until_idle(handle)
    for n in range(5):
        handle.send("noise", n)
    with pytest.raises(WorkflowInboxFull) as info:
        handle.send("noise", 5)
    assert info.value.qualified_code == "workflow/inbox_full"
    # The refused message was not stored.
    assert WorkflowMessage.objects.filter(workflow_id="inbox-bound").count() == 5


# -- logs and terminals ----------------------------------------------------------------
def test_a_gateway_token_in_the_path_is_not_logged(caplog):
    room = actors.get_or_create("chatRoom", "private")
    caplog.set_level(logging.INFO)
    response = post(
        f"/rivet/gateway/{room.actor_id}@not-the-secret/action/history",
        '{"args": []}',
        headers={"x-rivet-encoding": "json"},
    )
    assert response.status_code == 403
    assert "not-the-secret" not in caplog.text
    assert "@***" in caplog.text


def test_rivet_inspect_does_not_print_terminal_escapes_from_stored_values():
    counter = actors.get_or_create("counter", ["\x1b[31mred", "\x9b2J"])
    counter.call("increment", 1)
    Actor.objects.filter(pk=counter.actor_id).update(name="counter")
    out = StringIO()
    call_command("rivet_inspect", "actor", str(counter.actor_id), stdout=out)
    call_command("rivet_inspect", "actors", stdout=out)
    call_command("rivet_inspect", "actors", "--json", stdout=out)
    text = out.getvalue()
    assert "\x1b" not in text and "\x9b" not in text
    # Still shown, escaped.
    assert "\\u001b[31mred" in text


# -- what an answer tells a caller who holds only an actor id --------------------------
def test_an_answer_by_actor_id_does_not_name_the_class():
    room = actors.get_or_create("chatRoom", "private")
    response = post(
        f"/rivet/gateway/{room.actor_id}/action/nope",
        '{"args": []}',
        headers={"x-rivet-encoding": "json"},
    )
    assert response.status_code == 404
    assert "chatRoom" not in response.content.decode()
