"""The Python client's HTTP side against the real Django app, in process.

httpx's WSGI/ASGI transports stand in for the network; the views, runtime
and database are real. WebSocket use is covered end to end over daphne in
test_e2e_daphne.py.
"""

import httpx
import pytest
from django.core.asgi import get_asgi_application
from django.core.wsgi import get_wsgi_application

from django_rivet import (
    ActionNotFound,
    ActorAlreadyExists,
)
from django_rivet.client import AsyncConnection, Client, HTTPError
from django_rivet.testing import conn_params_protocol
from django_rivet.transport.parsing import parse_conn_params
from tests.support.client import assert_errors_are_rebuilt

pytestmark = pytest.mark.django_db(transaction=True)

BASE = "http://testserver/rivet"


@pytest.fixture
def client():
    http = httpx.Client(transport=httpx.WSGITransport(app=get_wsgi_application()))
    with Client(BASE, http=http) as client:
        yield client


def test_call_and_lifecycle(client):
    counter = client.actor("counter", ["client", "a"])
    assert counter.call("increment", 4) == 4
    info = counter.get()
    assert (info["name"], info["key"]) == ("counter", ["client", "a"])
    assert counter.get_or_create() == {"actor_id": info["actor_id"], "created": False}
    with pytest.raises(ActorAlreadyExists):
        counter.create()
    assert client.actor("counter", actor_id=info["actor_id"]).call("getCount") == 4


def test_errors_are_rebuilt_as_their_classes(client):
    assert_errors_are_rebuilt(client)


def test_non_rivet_errors_raise_http_error(client):
    with pytest.raises(HTTPError) as error:
        client.request_json("GET", "/no/such/route", [])
    assert error.value.metadata == {"status": 404}


def test_cbor_client_keeps_bytes():
    http = httpx.Client(transport=httpx.WSGITransport(app=get_wsgi_application()))
    with Client(BASE, encoding="cbor", http=http) as client:
        room = client.actor("chatRoom", "cbor")
        assert room.call("echo", {"raw": b"\x00\xff"}) == {"raw": b"\x00\xff"}


def test_queue_send_and_raw_request(client):
    room = client.actor("chatRoom", "queue")
    assert room.send("inbox", {"n": 1}) == {"status": "queued"}
    response = room.request("GET", "/hello/there")
    assert response.json()["path"] == "hello/there"


async def test_async_calls():
    ahttp = httpx.AsyncClient(transport=httpx.ASGITransport(app=get_asgi_application()))
    async with Client(BASE, ahttp=ahttp) as client:
        counter = client.actor("counter", "async")
        assert await counter.acall("increment", 2) == 2
        assert (await counter.aget())["key"] == ["async"]
        assert (await counter.aget_or_create())["created"] is False
        with pytest.raises(ActorAlreadyExists):
            await counter.acreate()
        with pytest.raises(ActionNotFound):
            await counter.acall("nope")


def test_websocket_url_follows_the_base_url():
    client = Client("https://example.com/api/rivet/")
    url = client.websocket_url("/actors/room/connect", [("key", "a b"), ("key", "c")])
    assert url == "wss://example.com/api/rivet/actors/room/connect?key=a+b&key=c"
    assert client.origin == "https://example.com"
    assert Client("http://h:8000/r").websocket_url("/x", []) == "ws://h:8000/r/x"


def test_conn_params_round_trip_through_the_subprotocol():
    params = {"name": "zoë", "n": [1, 2], "token": "?/+="}
    protocol = conn_params_protocol(params)
    assert protocol.startswith("rivet_conn_params.")
    assert "=" not in protocol
    assert parse_conn_params(["rivet", protocol]) == (params, True)
    conn = AsyncConnection(Client(BASE).actor("chatRoom", "x"), params)
    assert parse_conn_params(conn._subprotocols()) == (params, True)
