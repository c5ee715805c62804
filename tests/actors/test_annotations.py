"""Typed arguments and results: every transport, the shell, queues, schedules.

The test app's ``typedShop`` (tests/testapp/shop.py) takes and returns a
pydantic model holding dataclasses and a ``TypedDict`` with a ``Decimal``
and an ``Enum``. What a client sends comes back exactly, whatever carries
it; a value that does not fit is ``request/invalid_args`` naming its path,
with nothing written.
"""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal
from urllib.parse import quote

import cbor2
import pytest
from channels.testing import WebsocketCommunicator

from django_rivet import InvalidArgs, InvalidOutput, actors
from django_rivet.models import Actor, QueueMessage, Schedule
from django_rivet.testing import RivetCommunicator, run_due, websocket_application
from django_rivet.transport.rivetkit import bare
from tests.testapp.shop import Basket, Color, Line, Order

ORDER = {
    "id": "o-1",
    "lines": [
        {"sku": "apple", "price": "0.990", "qty": 3},
        {"sku": "pear", "price": "12.50", "qty": 1},
    ],
    "totals": {"total": "15.470", "color": "red"},
    "kind": "retail",
}
# One value that does not fit, deep inside: the third line's price.
BAD_ORDER = {
    **ORDER,
    "lines": [*ORDER["lines"], {"sku": "plum", "price": "a lot", "qty": 1}],
}


pytestmark = pytest.mark.django_db(transaction=True)


def post(client, action, args, key="k", encoding="json"):
    path = f"/rivet/actors/typedShop/actions/{action}?key={key}"
    if encoding == "cbor":
        response = client.post(
            path, cbor2.dumps({"args": args}), content_type="application/cbor"
        )
        return response.status_code, cbor2.loads(response.content)
    response = client.post(path, {"args": args}, content_type="application/json")
    return response.status_code, response.json()


# -- HTTP ---------------------------------------------------------------------------
@pytest.mark.parametrize("encoding", ["json", "cbor"])
def test_a_model_of_dataclasses_and_a_typeddict_round_trips_exactly_over_http(
    client, encoding
):
    assert post(client, "echo", [ORDER], encoding=encoding) == (200, {"output": ORDER})
    line = ORDER["lines"][0]
    assert post(client, "echo_line", [line], encoding=encoding) == (
        200,
        {"output": line},
    )
    totals = ORDER["totals"]
    assert post(client, "echo_totals", [totals], encoding=encoding) == (
        200,
        {"output": totals},
    )


def test_dates_and_enums_arrive_as_their_types(client):
    assert post(client, "delivery", ["2026-12-24", "blue"]) == (
        200,
        {"output": "2026-12-24 blue"},
    )


@pytest.mark.parametrize("encoding", ["json", "cbor"])
def test_a_wrong_field_is_invalid_args_naming_its_path_and_nothing_is_written(
    client, encoding
):
    status, body = post(client, "add", [ORDER["lines"][0]], key="w", encoding=encoding)
    assert status == 200
    before = Actor.objects.values_list("version", "state").get(key='["w"]')
    status, body = post(client, "echo", [BAD_ORDER], key="w", encoding=encoding)
    assert status == 400
    assert (body["group"], body["code"]) == ("request", "invalid_args")
    assert body["metadata"]["path"] == "args[0].lines[2].price"
    assert body["metadata"]["argument"] == "order"
    assert body["metadata"]["reason"] == "Input should be a valid decimal"
    assert body["message"] == "args[0].lines[2].price: Input should be a valid decimal"
    bad_line = {"sku": "x", "price": "1", "qty": 0}
    status, body = post(client, "add", [bad_line], key="w", encoding=encoding)
    assert (status, body["metadata"]["path"]) == (400, "args[0].qty")
    assert "greater than 0" in body["metadata"]["reason"]
    assert Actor.objects.values_list("version", "state").get(key='["w"]') == before


def test_typed_state_and_results_over_http(client):
    assert post(client, "add", [ORDER["lines"][0], "first"], key="s") == (
        200,
        {"output": "2.970"},
    )
    assert post(client, "add", [ORDER["lines"][1]], key="s") == (
        200,
        {"output": "15.470"},
    )
    assert post(client, "basket", [], key="s")[1]["output"] == {
        "lines": ORDER["lines"],
        "total": "15.470",
        "budget": None,
    }


def test_a_typed_creation_input_is_converted_for_create_state(client):
    response = client.put(
        "/rivet/actors/typedShop?key=opened",
        {"input": {"budget": "20.00"}},
        content_type="application/json",
    )
    assert response.status_code == 200
    assert post(client, "basket", [], key="opened")[1]["output"]["budget"] == "20.00"
    response = client.put(
        "/rivet/actors/typedShop?key=refused",
        {"input": {"budget": "lots"}},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["metadata"]["path"] == "input.budget"
    assert not Actor.objects.filter(key='["refused"]').exists()
    shop = actors.get_or_create(
        "typedShop", "shell-opened", input={"budget": Decimal(5)}
    )
    assert shop.call("basket").budget == Decimal(5)


def test_a_result_that_does_not_fit_its_annotation_is_invalid_output(client):
    status, body = post(client, "wrong_result", [])
    assert (status, body["code"]) == (500, "invalid_output")
    assert body["metadata"]["path"] == "output.price"
    assert body["metadata"]["action"] == "wrong_result"


# -- the shell ----------------------------------------------------------------------
def test_handle_call_takes_and_returns_the_declared_types():
    shop = actors.get_or_create("typedShop", "shell")
    order = Order.model_validate(ORDER)
    echoed = shop.call("echo", order)
    assert isinstance(echoed, Order) and echoed == order
    assert echoed is not order  # a copy, as over the wire
    assert echoed.lines[1] == Line("pear", Decimal("12.50"), 1)
    assert echoed.totals == {"total": Decimal("15.470"), "color": Color.RED}
    assert shop.call("add", Line("fig", Decimal("0.10"), 3)) == Decimal("0.30")
    assert shop.call("basket") == Basket(
        [Line("fig", Decimal("0.10"), 3)], Decimal("0.30")
    )
    assert shop.call("delivery", date(2026, 1, 2), Color.BLUE) == "2026-01-02 blue"
    with pytest.raises(InvalidArgs) as bad:
        shop.call("echo", BAD_ORDER)
    assert bad.value.metadata["path"] == "args[0].lines[2].price"
    with pytest.raises(InvalidOutput):
        shop.call("wrong_result")


# -- WebSockets ---------------------------------------------------------------------
@pytest.mark.parametrize("encoding", ["json", "cbor"])
async def test_round_trips_over_the_rivet_websocket(encoding):
    comm = RivetCommunicator("typedShop", ["ws"], encoding=encoding)
    await comm.handshake()
    await comm.subscribe("added")
    assert await comm.call("echo", ORDER) == ORDER
    assert await comm.call("add", ORDER["lines"][1]) == "12.50"
    event = await comm.receive_event("added")
    assert event["args"] == [ORDER["lines"][1]]
    with pytest.raises(InvalidArgs) as bad:
        await comm.call("echo", BAD_ORDER)
    assert bad.value.metadata["path"] == "args[0].lines[2].price"
    await comm.disconnect()


def rivetkit_communicator(encoding):
    protocols = ["rivet", f"rivet_encoding.{encoding}"]
    protocols.append("rivet_conn_params." + quote(json.dumps({"name": "ann"}), safe=""))
    return WebsocketCommunicator(
        websocket_application("rivet/"),
        "/rivet/gateway/typedShop/connect?rvt-method=getOrCreate&rvt-key=rk",
        subprotocols=protocols,
    )


def rivetkit_action(encoding, action_id, name, args):
    if encoding == "bare":
        return {"bytes_data": bare.write_to_server(
            bare.ActionRequest(action_id, name, cbor2.dumps(args))
        )}  # fmt: skip
    frame = {"body": {"tag": "ActionRequest", "val": {
        "id": ["$BigInt", str(action_id)], "name": name, "args": args}}}  # fmt: skip
    if encoding == "json":
        return {"text_data": json.dumps(frame)}
    frame["body"]["val"]["id"] = action_id
    return {"bytes_data": cbor2.dumps(frame)}


async def rivetkit_reply(comm, encoding):
    data = await comm.receive_from(10)
    body = (json.loads(data) if encoding == "json" else cbor2.loads(data))["body"]
    return body["tag"], body["val"]


@pytest.mark.parametrize("encoding", ["json", "cbor"])
async def test_round_trips_over_the_rivetkit_websocket(encoding):
    comm = rivetkit_communicator(encoding)
    connected, _ = await comm.connect(10)
    assert connected
    assert (await rivetkit_reply(comm, encoding))[0] == "Init"
    await comm.send_to(**rivetkit_action(encoding, 1, "echo", [ORDER]))
    tag, val = await rivetkit_reply(comm, encoding)
    assert (tag, val["output"]) == ("ActionResponse", ORDER)
    await comm.send_to(**rivetkit_action(encoding, 2, "echo", [BAD_ORDER]))
    tag, val = await rivetkit_reply(comm, encoding)
    assert (tag, val["code"], val["metadata"]["path"]) == (
        "Error",
        "invalid_args",
        "args[0].lines[2].price",
    )
    await comm.disconnect()


async def test_round_trips_over_the_rivetkit_websocket_in_bare():
    comm = rivetkit_communicator("bare")
    connected, _ = await comm.connect(10)
    assert connected
    await comm.receive_from(10)  # Init
    await comm.send_to(**rivetkit_action("bare", 1, "echo", [ORDER]))
    assert await comm.receive_from(10) == bare.write_to_client(
        bare.ActionResponse(1, cbor2.dumps(ORDER))
    )
    await comm.disconnect()


# -- queues and schedules -----------------------------------------------------------
def test_a_typed_queue_body_is_checked_when_sent_and_converted_for_its_handler(
    client,
):
    shop = actors.get_or_create("typedShop", "queued")
    with pytest.raises(InvalidArgs) as bad:
        shop.send("orders", BAD_ORDER)
    assert bad.value.metadata["path"] == "body.lines[2].price"
    response = client.post(
        "/rivet/actors/typedShop/queue/orders?key=queued",
        {"body": BAD_ORDER},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["metadata"]["path"] == "body.lines[2].price"
    assert not QueueMessage.objects.exists()
    reply = shop.send("orders", Order.model_validate(ORDER), wait=True)
    assert reply == {
        "status": "completed",
        "response": {"total": "15.470", "color": "red"},
    }
    assert shop.call("total") == Decimal("15.470")


def test_typed_schedule_arguments_are_stored_as_the_wire_carries_them():
    from django_rivet import Actor, action
    from django_rivet.testing import freeze_time, register_temporarily

    class TypedPlanner(Actor):
        name = "typedPlanner"
        initial_state = {"added": []}

        @action
        def plan(self, ctx):
            ctx.schedule.after(5, "record", Line("kiwi", Decimal("0.45"), 2))

        @action
        def plan_badly(self, ctx):
            ctx.schedule.after(5, "record", {"sku": "kiwi", "price": "?"})

        @action
        def record(self, ctx, line: Line):
            assert isinstance(line, Line)
            ctx.state["added"].append(str(line.price * line.qty))

        @action
        def added(self, ctx):
            return ctx.state["added"]

    with register_temporarily(TypedPlanner), freeze_time() as clock:
        planner = actors.get_or_create("typedPlanner", "p")
        with pytest.raises(InvalidArgs) as bad:
            planner.call("plan_badly")
        assert bad.value.metadata["path"] == "args[0].price"
        planner.call("plan")
        [row] = Schedule.objects.all()
        assert cbor2.loads(bytes(row.args)) == [
            {"sku": "kiwi", "price": "0.45", "qty": 2}
        ]
        clock.advance(6)
        assert run_due() == 1
        assert planner.call("added") == ["0.90"]
