"""The byte scans that refuse oversized messages before they are built (issue 40).

A property pins each scan to what decoding then walking the value finds
(entries and nesting), for JSON and for CBOR written every way a client may
write it (definite and indefinite lengths, tags, chunked strings); the
issue's hostile shapes are refused without the decoder running, on every
path a client's message takes.
"""

import json

import cbor2
import pytest
from django.test import RequestFactory
from hypothesis import given, settings
from hypothesis import strategies as st

from django_rivet import encoding, splicing
from django_rivet.domain import MAX_DEPTH, MAX_ENTRIES, value_problem
from django_rivet.encoding import decode, decode_message
from django_rivet.exceptions import MalformedRequest
from django_rivet.prescan import cbor_excess, json_excess, too_deep, too_many
from django_rivet.transport import http
from django_rivet.transport.consumer import RivetConsumer
from django_rivet.transport.rivetkit import bare, protocol

MIB = 1024 * 1024
# The issue's shapes: 1 MiB bodies that took seconds to build for their size.
EMPTY_LISTS = cbor2.dumps([[]] * 1_000_000)
MAPS = cbor2.dumps([{"": {}}] * 349_000)
JSON_LISTS = json.dumps([[]] * 349_000, separators=(",", ":"))

leaves = st.sampled_from(
    [0, 23, 24, 255, 65536, 2**40, -1, -(2**40), 1.5, True, None, "", "é",
     "a,b", "[", "]]", "{[,", 'q"\\', "x" * 30]
)  # fmt: skip
values = st.recursive(
    leaves,
    lambda children: (
        st.lists(children, max_size=6)
        | st.dictionaries(st.sampled_from(["a", "b,", "[c", "d"]), children, max_size=4)
        # Runs of one item, which the CBOR scan skips at once.
        | st.builds(lambda item, n: [item] * n, leaves, st.integers(2, 40))
    ),
    max_leaves=40,
)
# Deep and wide values take a while to build and write.
examples = settings(max_examples=150, deadline=None)


def measured(value):
    """``(entries, depth)`` as decoding and walking the value counts them."""
    entries = depth = 0
    level = [value] if isinstance(value, list | dict) else []
    while level:
        depth += 1
        entries += sum(len(item) for item in level)
        level = [
            child
            for item in level
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, list | dict)
        ]
    return entries, depth


def head(major, length):
    return splicing.cbor_head(major, length)


def written(value, draw):
    """CBOR of ``value`` written as clients may: indefinite, tagged, chunked."""
    tag = head(6, 99) if draw(st.booleans()) and draw(st.booleans()) else b""
    indefinite = draw(st.booleans())
    if isinstance(value, list):
        items = b"".join(written(item, draw) for item in value)
        if indefinite:
            return tag + b"\x9f" + items + b"\xff"
        return tag + head(4, len(value)) + items
    if isinstance(value, dict):
        items = b"".join(written(k, draw) + written(v, draw) for k, v in value.items())
        if indefinite:
            return tag + b"\xbf" + items + b"\xff"
        return tag + head(5, len(value)) + items
    if isinstance(value, str) and len(value) > 1 and indefinite:
        return tag + b"\x7f" + cbor2.dumps(value[:1]) + cbor2.dumps(value[1:]) + b"\xff"
    return tag + cbor2.dumps(value)


@examples
@given(values, st.data())
def test_the_cbor_scan_counts_what_decoding_would_build(value, data):
    entries, depth = measured(value)
    body = written(value, data.draw)
    max_entries = data.draw(st.integers(0, max(entries + 1, len(body) - 1)))
    max_depth = data.draw(st.integers(1, depth + 1))
    excess = cbor_excess(body, max_entries, max_depth)
    if len(body) <= max_entries:  # too small to hold too much: not scanned
        assert excess is None
    else:
        assert (excess is not None) == (entries > max_entries or depth > max_depth)


@examples
@given(values, st.data())
def test_the_json_scan_counts_what_decoding_would_build(value, data):
    entries, depth = measured(value)
    separators = data.draw(st.sampled_from([(",", ":"), (", ", ": ")]))
    text = json.dumps(
        value, separators=separators, indent=data.draw(st.none() | st.just(1))
    )
    max_entries = data.draw(st.integers(0, max(entries + 1, len(text) // 2)))
    max_depth = data.draw(st.integers(1, depth + 1))
    excess = json_excess(text, max_entries, max_depth)
    if len(text) <= 2 * max_entries + 1:
        assert excess is None
    else:
        assert (excess is not None) == (entries > max_entries or depth > max_depth)


@pytest.fixture
def no_decoder(monkeypatch):
    """The CBOR and JSON decoders fail the test if they are reached."""

    def reached(*args, **kwargs):
        raise AssertionError("the decoder ran")

    class Json:
        loads = staticmethod(reached)

    monkeypatch.setattr(encoding, "_cbor_decode", reached)
    monkeypatch.setattr(encoding, "json", Json)


@pytest.mark.parametrize(
    ("data", "encoding_"),
    [(EMPTY_LISTS, "cbor"), (MAPS, "cbor"), (JSON_LISTS, "json")],
    ids=["cbor-1M-empty-lists", "cbor-349k-maps", "json-349k-lists"],
)
def test_the_issues_bodies_are_refused_before_they_are_built(
    no_decoder, data, encoding_
):
    assert len(data) <= MIB
    with pytest.raises(MalformedRequest) as refused:
        decode_message(data, encoding_)
    assert refused.value.metadata == {"reason": too_many(MAX_ENTRIES)}


def test_nesting_past_the_limit_is_refused_before_it_is_built(no_decoder):
    padding = ["xyzw"] * (MAX_ENTRIES // 2)
    deep = [padding, "[" * 200]  # brackets in a string are not nesting
    nested = [padding]
    for _ in range(MAX_DEPTH):
        nested = [nested]
    for value, refused in [(deep, False), (nested, True)]:
        for encoding_, data in [
            ("json", json.dumps(value)),
            ("cbor", cbor2.dumps(value)),
        ]:
            assert len(data) > 2 * MAX_ENTRIES + 1  # large enough to be scanned
            if refused:
                with pytest.raises(MalformedRequest, match="nest at most"):
                    decode_message(data, encoding_)
            else:
                scan = json_excess if encoding_ == "json" else cbor_excess
                assert scan(data) is None


def test_messages_within_the_limits_decode_as_before():
    wide = [[0] * 999] * (MAX_ENTRIES // 1000)  # 99,999 entries
    for encoding_ in ("json", "cbor"):
        data = encoding.encode(wide, encoding_)
        assert decode(data, encoding_) == wide


@pytest.mark.parametrize(
    "data",
    [
        b"\xc0" * MIB + b"\x00",  # a chain of tags: cbor2 counts them as levels
        b"\x9f" + b"\x80" * MIB,  # truncated
        b"\x9f\x1c" + b"\x80" * MIB,  # a reserved head
        b"\xbf\x60\x80\xff" + b"\x80" * MIB,  # trailing bytes
    ],
    ids=["tags", "truncated", "reserved", "trailing"],
)
def test_malformed_cbor_is_left_to_the_decoder(data):
    with pytest.raises(MalformedRequest, match="Malformed CBOR"):
        decode(data, "cbor")


def test_an_unterminated_json_string_is_scanned_once():
    # Every quote after the first is escaped: a scan retrying at each would
    # be quadratic.
    text = '["' + '\\"' * (MIB // 2)
    assert json_excess(text) is None
    with pytest.raises(MalformedRequest, match="Malformed JSON"):
        decode(text, "json")


def test_a_refusal_says_what_the_value_walk_says():
    # The same words whether the bytes or the built value were counted.
    wide = [[0] * 1000] * (MAX_ENTRIES // 1000 + 1)
    assert value_problem(wide, max_entries=MAX_ENTRIES) == ("", too_many(MAX_ENTRIES))
    deep: list = []
    for _ in range(MAX_DEPTH):
        deep = [deep]
    assert value_problem(deep)[1] == too_deep(MAX_DEPTH)


# -- every path a client's message takes -----------------------------------------------
def _rivet_frame(kind):
    def decode_frame(data):
        consumer = RivetConsumer()
        consumer.encoding = kind
        return consumer.decode_frame(data)

    return decode_frame


def _http_body(data, content_type):
    return http.read_body(
        RequestFactory().post("/", data=data, content_type=content_type)
    )


ENTRY_POINTS = {
    "http-json": (lambda: _http_body(JSON_LISTS, "application/json")),
    "http-cbor": (lambda: _http_body(MAPS, "application/cbor")),
    "rivet-ws-json": (
        lambda: _rivet_frame("json")(
            '{"type":"action","id":1,"name":"x","args":' + JSON_LISTS + "}"
        )
    ),
    "rivet-ws-cbor": (
        lambda: _rivet_frame("cbor")(
            cbor2.dumps({"type": "action", "id": 1, "name": "x", "args": [[]] * MIB})
        )
    ),
    "rivetkit-ws-json": (
        lambda: protocol.decode_frame(
            '{"body":{"tag":"ActionRequest","val":{"id":1,"name":"x","args":'
            + JSON_LISTS
            + "}}}",
            "json",
        )
    ),
    "rivetkit-ws-cbor": (
        lambda: protocol.decode_frame(
            cbor2.dumps(
                {
                    "body": {
                        "tag": "ActionRequest",
                        "val": {"id": 1, "name": "x", "args": [[]] * MIB},
                    }
                }
            ),
            "cbor",
        )
    ),  # fmt: skip
    "rivetkit-ws-bare": (
        lambda: protocol.decode_frame(
            bare.write_to_server(bare.ActionRequest(1, "x", EMPTY_LISTS)), "bare"
        )
    ),
    "rivetkit-http-json": (
        lambda: protocol.decode_action_args(
            ('{"args":' + JSON_LISTS + "}").encode(), "json"
        )
    ),
    "rivetkit-http-cbor": (
        lambda: protocol.decode_action_args(cbor2.dumps({"args": [[]] * MIB}), "cbor")
    ),
    "rivetkit-http-bare": (
        lambda: protocol.decode_action_args(bare.write_action_request(MAPS), "bare")
    ),
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_flavour_refuses_before_building(no_decoder, entry):
    with pytest.raises(MalformedRequest, match="at most 100000 list items"):
        ENTRY_POINTS[entry]()
