"""One value domain, the same on every transport and in the shell (issue 25).

An action that writes everywhere (state, KV, a schedule, an event, a row of
the app's own model) and then returns a value outside the domain commits
nothing and answers ``actor/invalid_output`` -- over HTTP (JSON, CBOR and
the RivetKit gateway's three encodings), over WebSocket (the own protocol
and the RivetKit flavour in JSON, CBOR and BARE), through one daphne serving
``tests.support.asgi`` (the quickstart's stack), and from ``handle.call``. Writes
outside the domain are refused where they are made, naming the path.
"""

from __future__ import annotations

import json
import uuid
from decimal import Decimal

import cbor2
import httpx
import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_rivet import InvalidArgs, InvalidOutput, InvalidValue, actors
from django_rivet.models import Actor, ActorEvent, ActorKV, Schedule
from django_rivet.transport.rivetkit import bare
from tests.support.servers import (
    wait_until_no_connection_rows,
)
from tests.testapp.models import Note
from tests.transport.test_transport_matrix import open_socket

# pg: the PostgreSQL leg runs this module (an output outside the domain
# rolls back state, KV and ORM writes).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

KINDS = {
    # kind -> the path the error names
    "decimal": "output.price",
    "set": "output[0]",
    "bigint": "output.total",
}
HTTP_WAYS = ["json", "cbor", "rivetkit-json", "rivetkit-cbor", "rivetkit-bare"]
SOCKETS = ["rivet", "rivetkit-json", "rivetkit-cbor", "rivetkit-bare"]


@pytest.fixture(autouse=True)
async def _rows_gone_before_flush():
    yield
    await wait_until_no_connection_rows(20)


def snapshot(key):
    """Everything an invocation of ``till[key]`` can write."""
    row = Actor.objects.get(name="till", key=json.dumps([key]))
    return {
        "row": (bytes(row.state), row.version, row.event_seq),
        "kv": list(ActorKV.objects.filter(actor=row).values_list("key", flat=True)),
        "schedules": Schedule.objects.filter(actor_id=row.id).count(),
        "events": ActorEvent.objects.filter(actor_id=row.id).count(),
        "notes": Note.objects.filter(text__startswith="till").count(),
    }


def new_till():
    key = f"k{uuid.uuid4().hex[:10]}"
    actors.get_or_create("till", key)
    return key, snapshot(key)


# -- an output outside the domain rolls everything back --------------------------------
def http_call(url, way, key, action, *args):
    """Call over HTTP; return ``(status, code, metadata)``."""
    if way in ("json", "cbor"):
        path = f"{url}/rivet/actors/till/actions/{action}?key={key}"
        body = {"args": list(args)}
        if way == "json":
            response = httpx.post(path, json=body, timeout=30)
            error = response.json()
        else:
            response = httpx.post(
                path,
                content=cbor2.dumps(body),
                headers={"Content-Type": "application/cbor"},
                timeout=30,
            )
            error = cbor2.loads(response.content)
        return response.status_code, error.get("code"), error.get("metadata")
    encoding = way.partition("-")[2]
    path = (
        f"{url}/rivet/gateway/till/action/{action}?rvt-method=getOrCreate&rvt-key={key}"
    )
    content = {
        "json": lambda: json.dumps({"args": list(args)}).encode(),
        "cbor": lambda: cbor2.dumps({"args": list(args)}),
        "bare": lambda: bare.write_action_request(cbor2.dumps(list(args))),
    }[encoding]()
    response = httpx.post(
        path,
        content=content,
        headers={
            "x-rivet-encoding": encoding,
            "Content-Type": "application/json"
            if encoding == "json"
            else "application/octet-stream",
        },
        timeout=30,
    )
    # Errors come back as JSON to a JSON request, else in the request's encoding.
    if encoding == "json":
        error = response.json()
    elif encoding == "cbor":
        error = cbor2.loads(response.content)
    else:
        return response.status_code, _bare_error_code(response.content), None
    return response.status_code, error.get("code"), error.get("metadata")


def _bare_error_code(data):
    reader = bare._open(data)
    reader.string()  # group
    return reader.string()


@pytest.mark.servers
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("way", HTTP_WAYS)
def test_an_http_action_returning_outside_the_domain_changes_nothing(server, way, kind):
    key, before = new_till()
    status, code, metadata = http_call(server, way, key, "add_and_return", kind)
    assert (status, code) == (500, "invalid_output")
    if metadata is not None:
        assert metadata["action"] == "add_and_return"
        assert metadata["path"] == KINDS[kind]
    assert snapshot(key) == before


@pytest.mark.servers
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("flavour", SOCKETS)
async def test_a_websocket_action_returning_outside_the_domain_changes_nothing(
    server, flavour, kind
):
    key, before = await sync_to_async(new_till)()

    class Server:
        url = server

    sock = await open_socket(Server, flavour, "till", key)
    assert (await sock.read())[0] == "init"
    await sock.send(sock.wire.action(7, "add_and_return", [kind]))
    await sock.send(sock.wire.action(8, "count"))
    frames = await sock.until(lambda f: len(f) >= 2)
    await sock.ws.close()
    assert frames == [("error", "actor/invalid_output", 7), ("response", 8, 0)]
    assert await sync_to_async(snapshot)(key) == before


@pytest.mark.parametrize("kind", KINDS)
def test_handle_call_refuses_an_output_outside_the_domain_and_changes_nothing(kind):
    key, before = new_till()
    with pytest.raises(InvalidOutput) as info:
        actors.get("till", key).call("add_and_return", kind)
    assert info.value.qualified_code == "actor/invalid_output"
    assert info.value.metadata["path"] == KINDS[kind]
    assert snapshot(key) == before


# -- writes outside the domain are refused where they are made -------------------------
@pytest.mark.parametrize(
    ("where", "kind", "path"),
    [
        ("state", "decimal", "state.bad.price"),
        ("state", "intkey", "state.bad"),
        ("kv", "set", "kv value[0]"),
        ("event", "bigint", "event bad args[0].total"),
        ("queue", "nan", "body"),
        ("schedule", "decimal", "args[0].price"),
    ],
)
def test_writes_outside_the_domain_are_refused_naming_the_path(where, kind, path):
    key, before = new_till()
    with pytest.raises(InvalidValue) as info:
        actors.get("till", key).call("add_and_store", kind, where)
    assert info.value.metadata["path"] == path
    assert snapshot(key) == before
    # Over HTTP: the same coded refusal, nothing committed; the server's
    # fault (its code made the value), so a 500.
    response = Client().post(
        f"/rivet/actors/till/actions/add_and_store?key={key}",
        {"args": [kind, where]},
        content_type="application/json",
    )
    assert response.status_code == 500
    assert response.json()["metadata"]["path"] == path
    assert snapshot(key) == before


def test_the_shell_refuses_what_the_wire_refuses():
    key, before = new_till()
    handle = actors.get("till", key)
    for value, path in [
        (Decimal("1.5"), "args[0]"),
        (2**63, "args[0]"),
        ({"a": {3}}, "args[0].a"),
        (float("inf"), "args[0]"),
    ]:
        with pytest.raises(InvalidArgs) as info:
            handle.call("add", value)
        assert info.value.metadata["path"] == path
    with pytest.raises(InvalidArgs) as info:
        actors.get_or_create("till", "other", input={"when": Decimal(1)})
    assert info.value.metadata["path"] == "input.when"
    assert snapshot(key) == before
    assert not Actor.objects.filter(name="till", key='["other"]').exists()


# -- unknown body keys -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "body", "key"),
    [
        ("/rivet/actors/till/actions/add", {"by": 3}, "by"),
        ("/rivet/actors/till/actions/add", {"args": [3], "kwargs": {}}, "kwargs"),
        ("/rivet/actors/till/queue/inbox", {"body": 1, "priority": 2}, "priority"),
        ("/rivet/actors/till", {"input": 1, "inputs": 2}, "inputs"),
    ],
)
def test_unknown_body_keys_are_invalid_args_naming_the_key(path, body, key):
    till, before = new_till()
    method = Client().put if path == "/rivet/actors/till" else Client().post
    response = method(
        f"{path}?key={till}", json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 400
    error = response.json()
    assert (error["code"], error["metadata"]["key"]) == ("invalid_args", key)
    assert snapshot(till) == before


def test_unknown_body_keys_are_refused_on_the_rivetkit_gateway_too():
    till, before = new_till()
    response = Client().post(
        f"/rivet/gateway/till/action/add?rvt-method=get&rvt-key={till}",
        json.dumps({"args": [1], "by": 3}),
        content_type="application/json",
        headers={"x-rivet-encoding": "json"},
    )
    assert response.status_code == 400
    assert (response.json()["code"], response.json()["metadata"]["key"]) == (
        "invalid_args",
        "by",
    )
    assert snapshot(till) == before


# -- no sequence of valid calls makes an actor unreadable for JSON clients -------------
# What the wire accepts as an integer, up to what Python's JSON reads (4300
# digits), and the 64-bit integers of the domain.
wire_integers = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=4000, max_value=4300).map(lambda digits: -(10**digits - 1)),
    st.sampled_from([2**62, -(2**62), 2**63 - 1, -(2**63)]),
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(wire_integers, min_size=1, max_size=6))
def test_no_sequence_of_calls_makes_an_actor_unreadable_for_json_clients(amounts):
    client = Client()
    key = f"p{uuid.uuid4().hex[:10]}"
    path = "/rivet/actors/till/actions/{}?key=" + key
    for amount in amounts:
        client.post(
            path.format("add"),
            f'{{"args": [{amount}]}}',
            content_type="application/json",
        )
        response = client.post(
            path.format("count"), '{"args": []}', content_type="application/json"
        )
        assert response.status_code == 200, response.content[:200]
        count = json.loads(response.content)["output"]
        assert -(2**63) <= count <= 2**63 - 1
