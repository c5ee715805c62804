"""Hostile input through a daphne process (issue 12): a smaller run over sockets.

The same generators as test_hostile.py, sent to
``daphne tests.support.asgi:application`` on loopback with httpx and a
WebSocket client: never a 500 or an internal error, every error coded, only
valid calls change state, and the server keeps serving.
"""

import json

import cbor2
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from django_rivet.models import Actor as ActorRow
from tests.support.hostile import TOTALS, check_error, examples, payloads
from tests.support.polling import wait_for

pytestmark = [pytest.mark.servers, pytest.mark.django_db(transaction=True)]

CONTENT_TYPES = {"json": "application/json", "cbor": "application/cbor"}


def entries(key):
    row = ActorRow.objects.filter(name="ledger", key=json.dumps([key])).first()
    return row.decoded_state()["entries"] if row else 0


def test_hostile_http_bodies_through_daphne(server):
    url = f"{server}/rivet/actors/ledger/actions/record?key=daphne-hostile"
    answered = 0
    with httpx.Client(timeout=60) as http:

        @examples(300)
        @given(payloads(lambda value: {"args": [value]}))
        def case(payload):
            nonlocal answered
            encoding, data = payload
            if isinstance(data, str):
                data = data.encode("utf-8", "surrogatepass")
            response = http.post(
                url, content=data, headers={"Content-Type": CONTENT_TYPES[encoding]}
            )
            assert response.status_code < 500, response.content
            if response.status_code >= 400:
                media = response.headers["content-type"]
                body = (cbor2.loads if "cbor" in media else json.loads)(
                    response.content
                )
                TOTALS.record(check_error(body))
            else:
                answered += 1
                TOTALS.record(None)

        case()
        assert entries("daphne-hostile") == answered
        response = http.post(url, json={"args": ["still serving"]})
        assert response.json() == {"output": answered + 1}


def test_hostile_websocket_frames_through_daphne(server):
    url = server.replace("http", "ws", 1) + "/rivet/actors/ledger/connect?key=daphne-ws"
    state = {"ws": None, "sync": 2**62, "entries": 0}

    def socket():
        if state["ws"] is None:
            state["ws"] = ws_connect(url, subprotocols=["rivet"], max_size=None)
            state["ws"].__enter__()  # a context manager, closed in the finally
            assert json.loads(state["ws"].recv(30))["type"] == "init"
        return state["ws"]

    frames = payloads(
        lambda value: {"type": "action", "id": 1, "name": "record", "args": [value]}
    ).filter(lambda payload: payload[0] == "json")
    try:

        @examples(200)
        @given(frames | st.tuples(st.just("bytes"), st.binary(max_size=64)))
        def case(payload):
            ws = socket()
            kind, data = payload
            if kind != "bytes":
                # A text frame is UTF-8: lone surrogates cannot be sent raw.
                data = data.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
            try:
                ws.send(data)
                state["sync"] += 1
                ws.send(
                    json.dumps(
                        {"type": "action", "id": state["sync"], "name": "entries"}
                    )
                )
                answered = 0
                while True:
                    frame = json.loads(ws.recv(30))
                    if frame["type"] == "error":
                        TOTALS.record(check_error(frame))
                    elif frame["id"] != state["sync"]:
                        answered += 1
                        TOTALS.record(None)
                    else:
                        assert frame["output"] - state["entries"] <= answered
                        state["entries"] = frame["output"]
                        return
            except ConnectionClosed as closed:
                assert closed.rcvd is not None and closed.rcvd.code == 4413
                state["ws"] = None

        case()
        ws = socket()
        ws.send(json.dumps({"type": "action", "id": 1, "name": "entries"}))
        assert json.loads(ws.recv(30))["output"] == state["entries"]
    finally:
        if state["ws"] is not None:
            state["ws"].close()
    wait_for(
        lambda: entries("daphne-ws") == state["entries"],
        what=f"the server's record of the {state['entries']} entries sent",
    )
