"""Raw WebSockets to on_websocket, through channels' WebsocketCommunicator.

The official client over daphne is in rivetkit/test_e2e.py; these pin the
native route, the limits and the refusals.
"""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import override_settings

from django_rivet.models import Actor as ActorRow
from django_rivet.models import Connection
from django_rivet.testing import conn_params_protocol, websocket_application
from tests.support.polling import await_for

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = {"token": "doc-secret"}


def raw(key="d", params=TOKEN, path="", origin=None, name="doc"):
    headers = [(b"host", b"testserver")]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    subprotocols = ["rivet"]
    if params is not None:
        subprotocols.append(conn_params_protocol(params))
    return WebsocketCommunicator(
        websocket_application(),
        f"/rivet/actors/{name}/websocket{path}?key={key}",
        headers=headers,
        subprotocols=subprotocols,
    )


async def opened(comm):
    connected, subprotocol = await comm.connect()
    assert connected and subprotocol == "rivet"
    return comm


@sync_to_async
def doc_state(key="d"):
    return ActorRow.objects.get(name="doc", key=f'["{key}"]').decoded_state()


async def test_binary_and_text_frames_reach_on_websocket_and_back():
    alice = await opened(raw(path="/sync/here"))
    assert await alice.receive_from() == "welcome"
    bob = await opened(raw())
    assert await bob.receive_from() == "welcome"
    await alice.send_to(text_data="hello")
    assert await alice.receive_from() == "echo:hello"
    await alice.send_to(bytes_data=b"\x00\x01\xff")
    assert await bob.receive_output() == {
        "type": "websocket.send",
        "bytes": b"\x00\x01\xff",
    }
    assert await alice.receive_nothing(0.2)
    state = await doc_state()
    assert state["updates"] == 1 and state["texts"] == ["hello"]
    await alice.disconnect()
    await bob.disconnect()
    await await_for(
        sync_to_async(lambda: not Connection.objects.exists()), what="cleanup"
    )
    assert (await doc_state())["log"] == [
        "websocket",
        "websocket",
        "disconnect",
        "disconnect",
    ]


async def test_the_actor_closes_with_its_own_code():
    comm = await opened(raw())
    await comm.receive_from()
    await comm.send_to(text_data="close")
    assert await comm.receive_output() == {
        "type": "websocket.close",
        "code": 4001,
        "reason": "asked to",
    }


@pytest.mark.parametrize(
    ("kwargs", "code", "reason"),
    [
        ({"params": {"token": "wrong"}}, 4403, "user.token_required"),  # on_auth
        ({"origin": "https://evil.example"}, 4403, "actor.forbidden"),  # Origin
        ({"name": "counter"}, 4400, "actor.action_not_found"),  # no on_websocket
    ],
)
async def test_refused_handshakes_close_without_a_frame(kwargs, code, reason):
    comm = raw(**kwargs)
    connected, _ = await comm.connect()
    assert connected  # accepted first, so browsers see the code
    output = await comm.receive_output()
    assert output == {"type": "websocket.close", "code": code, "reason": reason}
    assert not await sync_to_async(Connection.objects.exists)()


@override_settings(RIVET={"MAX_INCOMING_MESSAGE_BYTES": 16})
async def test_frames_over_the_limit_close_the_socket():
    comm = await opened(raw())
    await comm.receive_from()
    await comm.send_to(bytes_data=b"x" * 17)
    output = await comm.receive_output()
    assert output["type"] == "websocket.close" and output["code"] == 4413
    assert (await doc_state())["updates"] == 0
