"""``ctx.request``: the connect hooks read the WebSocket handshake, as RivetKit's do.

Driven through ``tests.support.asgi`` (the quickstart's application, with
``AuthMiddlewareStack``) in both protocol flavours, with a logged-in session.
"""

import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client

from django_rivet import Actor, UserError, action
from django_rivet.testing import conn_params_protocol, register_temporarily
from tests.support.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


class Doorman(Actor):
    """Admits a handshake carrying ``?pass=yes``; remembers who knocked."""

    name = "doorman"

    def on_before_connect(self, ctx, params):
        if ctx.request.GET.get("pass") != "yes":
            raise UserError("Show your pass", code="no_pass")

    def create_conn_state(self, ctx, params):
        request = ctx.request
        return {
            "path": request.path,
            "agent": request.headers.get("User-Agent"),
            "client": request.META.get("REMOTE_ADDR"),
            "secure": request.is_secure(),
            "user": request.user.get_username(),
        }

    @action
    def knock(self, ctx):
        # Actions of the connection see the same handshake.
        return [ctx.conn.state, ctx.request.GET.get("pass")]


@pytest.fixture
def doorman():
    with register_temporarily(Doorman):
        yield


@pytest.fixture
async def session_cookie():
    def login():
        user = User.objects.create_user("ann", password="pw")
        client = Client()
        client.force_login(user)
        return client.cookies["sessionid"].value

    return f"sessionid={await sync_to_async(login)()}".encode()


ROUTES = {
    "rivet": (
        "/rivet/actors/doorman/connect?key=door&pass={answer}",
        ["rivet", conn_params_protocol({"name": "ann"})],
    ),
    "rivetkit": (
        "/rivet/gateway/doorman/connect?rvt-namespace=default&rvt-method=getOrCreate"
        "&rvt-key=door&pass={answer}",
        ["rivet", "rivet_encoding.json"],
    ),
}


def communicator(flavour, answer, cookie):
    path, subprotocols = ROUTES[flavour]
    comm = WebsocketCommunicator(
        application,
        path.format(answer=answer),
        subprotocols=subprotocols,
        headers=[(b"user-agent", b"knocker/1"), (b"cookie", cookie)],
    )
    comm.scope["client"] = ("203.0.113.9", 50000)  # as a server fills it in
    return comm


def frame(flavour, raw):
    data = json.loads(raw)
    return data if flavour == "rivet" else data["body"]


@pytest.mark.parametrize("flavour", ["rivet", "rivetkit"])
async def test_the_connect_hooks_read_the_handshake_request(
    doorman, session_cookie, flavour
):
    comm = communicator(flavour, "yes", session_cookie)
    assert (await comm.connect(10))[0]
    init = frame(flavour, await comm.receive_from(10))
    assert init.get("type", init.get("tag")).lower() == "init"
    call = (
        {"type": "action", "id": 1, "name": "knock", "args": []}
        if flavour == "rivet"
        else {"body": {"tag": "ActionRequest",
                       "val": {"id": ["$BigInt", "1"], "name": "knock", "args": []}}}
    )  # fmt: skip
    await comm.send_to(text_data=json.dumps(call))
    answer = frame(flavour, await comm.receive_from(10))
    output = answer["output"] if flavour == "rivet" else answer["val"]["output"]
    path = ROUTES[flavour][0].split("?")[0]
    assert output == [
        {
            "path": path,
            "agent": "knocker/1",
            "client": "203.0.113.9",
            "secure": False,
            "user": "ann",
        },
        "yes",
    ]
    await comm.disconnect()


@pytest.mark.parametrize("flavour", ["rivet", "rivetkit"])
async def test_on_before_connect_refuses_by_the_handshake_request(
    doorman, session_cookie, flavour
):
    comm = communicator(flavour, "no", session_cookie)
    assert (await comm.connect(10))[0]
    error = frame(flavour, await comm.receive_from(10))
    error = error if flavour == "rivet" else error["val"]
    assert (error["group"], error["code"]) == ("user", "no_pass")
    closed = await comm.receive_output(10)
    assert closed["code"] == 4403
