"""The BARE codec and the three encodings, against real client traffic.

``tests/rivetkit/fixtures/traffic.json`` holds the bytes the unchanged
``rivetkit`` client sent (and the server answered) for a fixed set of calls,
recorded by ``tests/rivetkit/capture.mjs``. The decoders must read exactly
what the client meant and the encoders must reproduce the bytes; a servers
test re-records the traffic with each pinned client version and compares.
"""

import json
import uuid
from collections import Counter

import pytest

from django_rivet.exceptions import MalformedRequest, UserError
from django_rivet.transport.rivetkit import bare, protocol
from django_rivet.transport.rivetkit.protocol import ActionCall, Subscription
from tests.support.servers import ROOT

FIXTURE = ROOT / "tests" / "rivetkit" / "fixtures" / "traffic.json"
TRAFFIC = json.loads(FIXTURE.read_text())["traffic"]
ENCODINGS = ["bare", "json", "cbor"]

# What capture.mjs sends: echo(ECHO) over HTTP and WebSocket...
ECHO = [1, "two", b"\x03\x04", 2**62, {"nested": [True, None]}]
# ...a queue send with wait, and these frames on a connection.
QUEUE = protocol.QueueSend(body={"n": 1}, name="inbox", wait=True, timeout=5000)
FRAMES = [
    Subscription("newMessage", True),
    ActionCall(0, "echo", [ECHO]),
    ActionCall(1, "send_message", ["hi"]),
    ActionCall(2, "nope", []),
]


def raw(hex_text):
    return bytes.fromhex(hex_text)


def client_bytes(encoding, hex_text):
    data = raw(hex_text)
    return data.decode() if encoding == "json" else data


# -- what the client sends ------------------------------------------------------------
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_http_action_body_of_the_client_decodes_to_its_arguments(encoding):
    action = TRAFFIC[encoding]["http"][0]
    assert action["kind"] == "action"
    assert protocol.decode_action_args(raw(action["sent"]), encoding) == [ECHO]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_http_queue_body_of_the_client_decodes(encoding):
    queue = TRAFFIC[encoding]["http"][1]
    assert queue["kind"] == "queue"
    assert protocol.decode_queue_send(raw(queue["sent"]), encoding) == QUEUE


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_websocket_frames_of_the_client_decode(encoding):
    sent = TRAFFIC[encoding]["ws"]["sent"]
    decoded = [protocol.decode_frame(client_bytes(encoding, f), encoding) for f in sent]
    assert decoded == FRAMES


def test_bare_writers_reproduce_the_client_bytes():
    from django_rivet.encoding import cbor_loads

    traffic = TRAFFIC["bare"]
    frames = [raw(frame) for frame in traffic["ws"]["sent"]]
    for frame in frames:
        message = bare.read_to_server(frame)
        assert bare.write_to_server(message) == frame
    action = raw(traffic["http"][0]["sent"])
    assert bare.write_action_request(bare.read_action_request(action)) == action
    queue = raw(traffic["http"][1]["sent"])
    request = bare.read_queue_send_request(queue)
    assert bare.write_queue_send_request(request) == queue
    assert cbor_loads(request.body) == {"n": 1}


# -- what the server sends ----------------------------------------------------------
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_http_answers_are_the_recorded_bytes(encoding):
    action, queue = TRAFFIC[encoding]["http"]
    output = protocol.encode_output_value(ECHO, encoding)
    assert protocol.encode_action_output(output, encoding) == raw(action["received"])
    assert protocol.encode_queue_result(
        "completed", {"got": {"n": 1}}, True, encoding
    ) == raw(queue["received"])


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_websocket_frames_are_the_recorded_bytes(encoding):
    # The event and the response of send_message race: compare as a multiset.
    recorded = [raw(f) for f in TRAFFIC[encoding]["ws"]["received"][1:]]
    error = protocol.encode_error(_action_not_found(), action_id=2, encoding=encoding)
    ours = [
        protocol.encode_action_response(
            0, protocol.encode_output_value(ECHO, encoding), encoding
        ),
        protocol.encode_event("newMessage", ["cap", "hi"], encoding),
        protocol.encode_action_response(
            1, protocol.encode_output_value(1, encoding), encoding
        ),
        error,
    ]
    assert Counter(ours) == Counter(recorded)


def _action_not_found():
    from django_rivet.exceptions import ActionNotFound

    return ActionNotFound("The actor has no action 'nope'", metadata={"action": "nope"})


# -- the codec on its own -----------------------------------------------------------
def test_server_messages_have_the_version_4_layout():
    actor_id, conn_id = str(uuid.uuid4()), str(uuid.uuid4())
    init = bare.write_to_client(bare.Init(actor_id, conn_id))
    assert init[:3] == b"\x04\x00\x00"
    assert init[3] == 36 and init[4:40].decode() == actor_id
    error = bare.write_to_client(bare.Error("user", "x", "m", None, 300))
    # version, tag 1, 3 strings, no metadata, actionId present as varint 300,
    # no actor.
    assert error == b"\x04\x00\x01\x04user\x01x\x01m\x00\x01\xac\x02\x00"


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_every_version_the_client_can_send_is_read(version):
    frame = bytearray(bare.write_to_server(bare.SubscriptionRequest("e", True)))
    frame[0:2] = version.to_bytes(2, "little")
    assert bare.read_to_server(bytes(frame)) == bare.SubscriptionRequest("e", True)


@pytest.mark.parametrize(
    "data",
    [
        b"\x05\x00\x01\x01e\x01",  # version 5
        b"\x04\x00\x07",  # unknown tag
        b"\x04\x00\x01\x01e\x02",  # a bool of 2
        b"\x04\x00\x01\x01e\x01\x00",  # trailing byte
        b"\x04\x00\x01\x05e",  # truncated string
        b"\x04\x00\x00\x80\x00\x01a\x00",  # non-canonical varint
        b"\x04\x00\x00" + b"\xff" * 10 + b"\x01",  # varint over 10 bytes
        b"\x04\x00\x01\x02\xc3\x28\x01",  # invalid UTF-8
        b"\x04",  # no version
    ],
)
def test_malformed_bare_is_refused(data):
    with pytest.raises(MalformedRequest):
        bare.read_to_server(data)


def test_queue_requests_exist_only_from_version_3():
    body = bytearray(bare.write_queue_send_request(bare.QueueSendRequest(b"\xf6")))
    body[0:2] = (2).to_bytes(2, "little")
    with pytest.raises(MalformedRequest):
        bare.read_queue_send_request(bytes(body))


def test_largest_ids_survive():
    big = 2**64 - 1
    frame = bare.write_to_server(bare.ActionRequest(big, "a", b"\x80"))
    assert bare.read_to_server(frame) == bare.ActionRequest(big, "a", b"\x80")


def test_user_error_metadata_travels_as_cbor():
    data = protocol.encode_http_error(
        UserError("no", code="nope", metadata={"a": b"\x01"}), "bare"
    )
    assert data.startswith(b"\x04\x00\x04user\x04nope\x02no\x01")
