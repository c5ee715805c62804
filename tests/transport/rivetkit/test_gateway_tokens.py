"""The RivetKit client's token never reaches actor code in a path (issue 40).

The client writes its token in URLs (``gateway/{id}@{token}/...``,
``?rvt-token=``). ``on_auth`` reads it as the ``X-Rivet-Token`` header;
``ctx.request``, ``info.request`` and ``on_request``'s request show the
path and query with the token masked, so actor code that logs them (or an
error report that includes them) does not keep it.
"""

import json
from urllib.parse import quote

import pytest
from asgiref.sync import sync_to_async
from django.http import JsonResponse
from django.test import Client

from django_rivet import Actor, action, actors
from django_rivet.actors.registry import register_temporarily
from tests.transport.rivetkit.test_consumer import communicator

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "s3cret-t0ken"
BY_NAME = (
    "?rvt-namespace=default&rvt-method=getOrCreate&rvt-runner=default"
    f"&rvt-key=k&rvt-token={TOKEN}"
)
SEEN = []  # what on_auth was shown of the request


def view(request):
    """What code can read of a request (or a WebSocket's ASGI scope)."""
    if isinstance(request, dict):
        return {
            "path": request["path"],
            "query": request["query_string"].decode(),
            "route": request["url_route"]["kwargs"],
        }
    return {
        "path": request.path,
        "path_info": request.path_info,
        "full": request.get_full_path(),
        "GET": dict(request.GET),
        "QUERY_STRING": request.META["QUERY_STRING"],
        "route": request.resolver_match and request.resolver_match.kwargs,
    }


class Witness(Actor):
    """Opens for the token; tells what its code sees of the request."""

    name = "witness"
    csrf_exempt = True

    def on_auth(self, ctx, info):
        SEEN.append(view(info.request))
        return info.headers.get("X-Rivet-Token") == TOKEN

    @action
    def look(self, ctx):
        return view(ctx.request)

    def on_request(self, ctx, request):
        return JsonResponse({"request": view(request), "ctx": view(ctx.request)})


@pytest.fixture(autouse=True)
def witness():
    SEEN.clear()
    with register_temporarily(Witness):
        yield


def shown(seen):
    """Everything code saw, as text; the token must not be in it."""
    text = json.dumps(seen)
    assert TOKEN not in text, text
    return text


@pytest.fixture
def actor_id():
    return str(actors.get_or_create("witness", "k").actor_id)


def test_a_token_in_the_gateway_path_is_masked_for_actor_code(actor_id):
    response = Client().post(
        f"/rivet/gateway/{actor_id}@{TOKEN}/action/look",
        '{"args": []}',
        content_type="application/json",
        headers={"x-rivet-encoding": "json"},
    )
    assert response.status_code == 200, response.content  # on_auth had it
    output = response.json()["output"]
    assert output["path"] == f"/rivet/gateway/{actor_id}@***/action/look"
    assert output["route"]["target"] == f"{actor_id}@***"
    shown([output, SEEN])


def test_a_token_in_the_query_is_masked_for_actor_code():
    response = Client().post(
        f"/rivet/gateway/witness/action/look{BY_NAME}",
        '{"args": []}',
        content_type="application/json",
        headers={"x-rivet-encoding": "json"},
    )
    assert response.status_code == 200, response.content
    output = response.json()["output"]
    assert output["GET"]["rvt-token"] == ["***"]
    assert output["GET"]["rvt-key"] == ["k"]
    assert "rvt-token=***" in output["full"]
    shown([output, SEEN])


def test_on_request_sees_the_masked_path_and_the_body(actor_id):
    response = Client().post(
        f"/rivet/gateway/{actor_id}@{TOKEN}/request/hooks/ann@example.com?x=1",
        "payload",
        content_type="text/plain",
    )
    assert response.status_code == 200, response.content
    seen = response.json()
    assert seen["request"]["path"] == (
        f"/rivet/gateway/{actor_id}@***/request/hooks/ann@example.com"
    )
    assert seen["request"]["GET"] == {"x": ["1"]}
    assert seen["ctx"] == seen["request"]
    shown([seen, SEEN])


@pytest.mark.parametrize("by", ["id", "name"])
async def test_a_websocket_handshake_is_masked_for_actor_code(by):
    if by == "id":
        handle = await sync_to_async(actors.get_or_create)("witness", "k")
        target, query = f"{handle.actor_id}@{TOKEN}", ""
    else:
        target, query = "witness", BY_NAME
    comm = communicator(target, query=query)
    connected, _ = await comm.connect(10)
    assert connected
    init = json.loads(await comm.receive_from(10))
    assert init["body"]["tag"] == "Init", init  # on_auth had the token
    request = {"id": 1, "name": "look", "args": []}
    await comm.send_to(
        text_data=json.dumps({"body": {"tag": "ActionRequest", "val": request}})
    )
    answer = json.loads(await comm.receive_from(10))
    assert answer["body"]["tag"] == "ActionResponse", answer
    output = answer["body"]["val"]["output"]
    if by == "id":
        assert output["path"] == f"/rivet/gateway/{quote(target[:36])}@***/connect"
    else:
        assert "rvt-token=***" in output["QUERY_STRING"]
    shown([output, SEEN])
    await comm.disconnect()
