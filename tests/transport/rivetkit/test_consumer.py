"""The RivetKit WebSocket flavour through channels' WebsocketCommunicator.

What daphne hides: close reasons (daphne 4 drops them; uvicorn sends them)
and the exact frames. The real client over daphne is in test_e2e.py.
"""

import json
from urllib.parse import quote

import cbor2
import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from django_rivet import actors
from django_rivet.models import Connection
from django_rivet.testing import websocket_application
from django_rivet.transport.rivetkit import bare

pytestmark = pytest.mark.django_db(transaction=True)


def communicator(target, encoding="json", params=None, query="", origin=None, extra=()):
    protocols = ["rivet", f"rivet_encoding.{encoding}", *extra]
    if params is not None:
        protocols.append("rivet_conn_params." + quote(json.dumps(params), safe=""))
    headers = [(b"origin", origin.encode())] if origin else []
    return WebsocketCommunicator(
        websocket_application("rivet/"),
        f"/rivet/gateway/{target}/connect{query}",
        subprotocols=protocols,
        headers=headers,
    )


async def receive_json(comm):
    return json.loads(await comm.receive_from(10))


async def test_json_connection_speaks_tagged_frames_with_bigint_ids():
    query = "?rvt-namespace=default&rvt-method=getOrCreate&rvt-key=lobby"
    comm = communicator("chatRoom", params={"name": "ann"}, query=query)
    connected, subprotocol = await comm.connect(10)
    assert (connected, subprotocol) == (True, "rivet")
    init = await receive_json(comm)
    assert init["body"]["tag"] == "Init"
    conn_id = init["body"]["val"]["connectionId"]
    await comm.send_to(
        text_data=json.dumps(
            {"body": {"tag": "SubscriptionRequest",
                      "val": {"eventName": "newMessage", "subscribe": True}}}
        )
    )  # fmt: skip
    await comm.send_to(
        text_data=json.dumps(
            {"body": {"tag": "ActionRequest",
                      "val": {"id": ["$BigInt", "7"], "name": "send_message",
                              "args": ["hi"]}}}
        )
    )  # fmt: skip
    frames = [await receive_json(comm), await receive_json(comm)]
    assert {"tag": "ActionResponse", "val": {"id": ["$BigInt", "7"], "output": 1}} in [
        f["body"] for f in frames
    ]
    assert {"tag": "Event", "val": {"name": "newMessage", "args": ["ann", "hi"]}} in [
        f["body"] for f in frames
    ]
    rows = await sync_to_async(list)(Connection.objects.values_list("id", "params"))
    assert [(str(i), cbor2.loads(p)) for i, p in rows] == [(conn_id, {"name": "ann"})]
    await comm.disconnect()
    assert not await sync_to_async(Connection.objects.exists)()


async def test_refusal_sends_an_error_then_closes_with_group_dot_code():
    vault = await sync_to_async(actors.get_or_create)("vault", "closed")
    comm = communicator(str(vault.actor_id), encoding="cbor")
    connected, _ = await comm.connect(10)
    assert connected
    error = cbor2.loads(await comm.receive_from(10))["body"]
    assert error["tag"] == "Error"
    # Addressed by id, a refused caller is told what an unknown id is told.
    assert (error["val"]["group"], error["val"]["code"]) == ("actor", "not_found")
    assert error["val"]["actionId"] is None
    closed = await comm.receive_output(10)
    assert closed == {
        "type": "websocket.close",
        "code": 4400,
        "reason": "actor.not_found",
    }
    assert not await sync_to_async(Connection.objects.exists)()


async def test_token_subprotocol_reaches_on_auth_in_bare():
    vault = await sync_to_async(actors.get_or_create)("vault", "open")
    comm = communicator(
        str(vault.actor_id), encoding="bare", extra=["rivet_token.open-sesame"]
    )
    await comm.connect(10)
    init = await comm.receive_from(10)
    assert init[:3] == b"\x04\x00\x00"  # version 4, Init
    frame = bare.write_to_server(bare.ActionRequest(3, "open", cbor2.dumps([])))
    await comm.send_to(bytes_data=frame)
    assert await comm.receive_from(10) == bare.write_to_client(
        bare.ActionResponse(3, cbor2.dumps(1))
    )
    await comm.disconnect()


async def test_unknown_origins_are_refused_and_listed_cors_origins_admitted(
    settings,
):
    query = "?rvt-method=getOrCreate&rvt-key=o"
    comm = communicator("counter", query=query, origin="https://evil.example")
    await comm.connect(10)
    error = (await receive_json(comm))["body"]["val"]
    assert error["code"] == "forbidden"
    await comm.disconnect()
    settings.RIVET = {"CORS_ALLOWED_ORIGINS": ["https://evil.example"]}
    comm = communicator("counter", query=query, origin="https://evil.example")
    await comm.connect(10)
    assert (await receive_json(comm))["body"]["tag"] == "Init"
    await comm.disconnect()


@pytest.mark.parametrize(
    ("origin", "admitted"),
    [("http://testserver", True), ("http://localhost", False)],
)
async def test_same_origin_rule_is_the_own_protocols(origin, admitted):
    comm = WebsocketCommunicator(
        websocket_application("rivet/"),
        "/rivet/gateway/counter/connect?rvt-method=getOrCreate&rvt-key=same",
        subprotocols=["rivet", "rivet_encoding.json"],
        headers=[(b"host", b"testserver"), (b"origin", origin.encode())],
    )
    await comm.connect(10)
    frame = (await receive_json(comm))["body"]
    assert (frame["tag"] == "Init") is admitted, frame
    await comm.disconnect()


async def test_action_errors_carry_the_action_id_and_metadata():
    query = "?rvt-method=getOrCreate&rvt-key=err"
    comm = communicator("counter", query=query)
    await comm.connect(10)
    await receive_json(comm)
    await comm.send_to(
        text_data=json.dumps(
            {"body": {"tag": "ActionRequest",
                      "val": {"id": ["$BigInt", "2"], "name": "add_note_then_fail",
                              "args": ["z"]}}}
        )
    )  # fmt: skip
    error = (await receive_json(comm))["body"]["val"]
    assert error == {
        "group": "user",
        "code": "refused",
        "message": "refused on purpose",
        "metadata": {"text": "z"},
        "actionId": ["$BigInt", "2"],
    }
    await comm.disconnect()


async def test_kicked_connections_close_with_a_reason():
    query = "?rvt-method=getOrCreate&rvt-key=kick"
    comm = communicator("chatRoom", query=query, params={"name": "eve"})
    await comm.connect(10)
    await receive_json(comm)
    room = await sync_to_async(actors.get)("chatRoom", "kick")
    assert await room.acall("kick", "eve") == 1
    assert await comm.receive_output(10) == {
        "type": "websocket.close",
        "code": 1000,
        "reason": "actor.disconnected",
    }


async def test_connections_per_actor_are_bounded_in_this_protocol_too(settings):
    settings.RIVET = {"MAX_CONNECTIONS_PER_ACTOR": 1}
    query = "?rvt-method=getOrCreate&rvt-key=crowd"
    first = communicator("ledger", query=query)
    await first.connect(10)
    assert (await receive_json(first))["body"]["tag"] == "Init"
    second = communicator("ledger", query=query)
    await second.connect(10)
    error = (await receive_json(second))["body"]["val"]
    assert error["code"] == "too_many_connections"
    assert (await second.receive_output(10))["code"] == 4429
    await second.disconnect()
    await first.disconnect()


async def test_values_json_cannot_carry_are_refused_but_undefined_is_revived():
    query = "?rvt-method=getOrCreate&rvt-key=values"
    comm = communicator("ledger", encoding="cbor", query=query)
    await comm.connect(10)
    await comm.receive_output(10)

    def frame(action_id, args_cbor):
        val = (
            b"\xa3"
            + cbor2.dumps("id")
            + b"\x1b"
            + action_id.to_bytes(8, "big")
            + cbor2.dumps("name")
            + cbor2.dumps("keep")
            + cbor2.dumps("args")
            + args_cbor
        )
        return (
            b"\xa1"
            + cbor2.dumps("body")
            + b"\xa2"
            + cbor2.dumps("tag")
            + cbor2.dumps("ActionRequest")
            + cbor2.dumps("val")
            + val
        )

    await comm.send_to(bytes_data=frame(1, b"\x81\xf7"))  # [undefined]
    reply = cbor2.loads(await comm.receive_from(10))["body"]
    assert (reply["tag"], reply["val"]["output"]) == ("ActionResponse", "kept")
    await comm.send_to(bytes_data=frame(2, cbor2.dumps([float("nan")])))
    reply = cbor2.loads(await comm.receive_from(10))["body"]
    assert (reply["tag"], reply["val"]["code"]) == ("Error", "malformed")
    await comm.disconnect()
