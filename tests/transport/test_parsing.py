"""Reading keys from what clients send, the same on every route (issue 25).

A key of many empty parts counts against the limits, and bytes that are not
UTF-8 are refused rather than collapsed into one key: over HTTP, the
RivetKit gateway, and both WebSocket flavours.
"""

import json

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client

from django_rivet import actors
from django_rivet.exceptions import InvalidKey
from django_rivet.models import Actor
from django_rivet.testing import RivetCommunicator, websocket_application

# pg: the PostgreSQL leg runs this module (keys and query strings as each
# database stores them).
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
