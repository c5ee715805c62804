"""CBOR/JSON codecs: round trips, and untrusted input refused fast."""

import datetime
import re
import time
import uuid

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_rivet.encoding import (
    cbor_dumps,
    cbor_loads,
    decode,
    encode,
    json_dumps,
    json_loads,
    parse_encoding,
)
from django_rivet.exceptions import InvalidEncoding, MalformedRequest

# Values every codec must carry: what actor state and action results hold.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)
cbor_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
    | st.uuids()
    | st.datetimes(timezones=st.just(datetime.UTC)),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


@given(cbor_values)
def test_cbor_round_trip(value):
    assert cbor_loads(cbor_dumps(value)) == value


@given(json_values)
def test_json_round_trip(value):
    assert json_loads(json_dumps(value)) == value


@given(json_values)
def test_wire_round_trip_in_both_encodings(value):
    for encoding in ("json", "cbor"):
        assert decode(encode(value, encoding), encoding) == value


def test_naive_datetimes_are_stored_as_utc():
    naive = datetime.datetime(2026, 1, 2, 3, 4, 5)
    assert cbor_loads(cbor_dumps(naive)) == naive.replace(tzinfo=datetime.UTC)


def test_json_writes_datetimes_uuids_and_bytes_in_documented_forms():
    value = {
        "at": datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC),
        "id": uuid.UUID(int=1),
        "raw": b"\x00\xff",
    }
    assert json_loads(json_dumps(value)) == {
        "at": "2026-01-02T00:00:00+00:00",
        "id": "00000000-0000-0000-0000-000000000001",
        "raw": {"$bytes": "AP8="},
    }


@pytest.mark.parametrize(
    "value",
    [{1, 2}, re.compile("a+"), cbor2.CBORTag(4000, 1), object()],
    ids=["set", "regex", "unknown-tag", "object"],
)
def test_values_that_could_not_be_read_back_are_refused_on_encode(value):
    with pytest.raises(TypeError):
        cbor_dumps(value)


@pytest.mark.parametrize(
    "data",
    [
        cbor2.dumps(re.compile("(a+)+$")),  # tag 35: would compile a regex
        cbor2.dumps({1, 2}),  # tag 258: set
        cbor2.dumps(cbor2.CBORTag(28, [1])),  # shared references
        cbor2.dumps(cbor2.CBORTag(36, "Content-Type: text/plain\n\nhi")),  # MIME
        cbor2.dumps(cbor2.CBORTag(9999, "x")),  # unknown tag
        b"\xd9\xd9\xf7\xd8\x23ba+",  # self-describe tag wrapping a regex
    ],
    ids=["regex", "set", "shared-ref", "mime", "unknown", "self-describe"],
)
def test_cbor_tags_outside_the_allow_list_are_malformed(data):
    with pytest.raises(MalformedRequest):
        cbor_loads(data)


def test_allowed_tags_decode():
    value = [
        datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        2**100,
        -(2**100),
        uuid.uuid4(),
    ]
    assert cbor_loads(cbor2.dumps(value, timezone=datetime.UTC)) == value


@pytest.mark.parametrize(
    "data",
    [
        b"\x81" * 100_000 + b"\x00",  # 100k nested arrays
        b"\x5b\x0f\xff\xff\xff\xff\xff\xff\xff" + b"a" * 10,  # 2**60-byte string
        b"\x9b\x0f\xff\xff\xff\xff\xff\xff\xff",  # 2**60-item array
        b"\xbb\x0f\xff\xff\xff\xff\xff\xff\xff",  # 2**60-pair map
        b"\x7b\x0f\xff\xff\xff\xff\xff\xff\xff",  # 2**60-byte text
        b"\x01\x02",  # trailing bytes
        b"",
        b"\xff",
    ],
    ids=[
        "deep",
        "huge-bytes",
        "huge-array",
        "huge-map",
        "huge-text",
        "trailing",
        "empty",
        "break",
    ],
)
def test_malicious_cbor_is_refused_fast(data):
    started = time.perf_counter()
    with pytest.raises(MalformedRequest):
        cbor_loads(data)
    # Not a timing assertion on a feature: a hang here would be the bug.
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize(
    "data",
    ["{", "[1,]", "NaN", '{"a": Infinity}', "[" * 100_000 + "]" * 100_000, b"\xff"],
    ids=["truncated", "trailing-comma", "nan", "infinity", "deep", "not-utf8"],
)
def test_malformed_json_is_refused(data):
    with pytest.raises(MalformedRequest):
        json_loads(data)


def test_cbor_from_a_text_frame_is_malformed():
    with pytest.raises(MalformedRequest):
        decode("text", "cbor")


def test_parse_encoding():
    assert parse_encoding(None) == "json"
    assert parse_encoding("json") == "json"
    assert parse_encoding("cbor") == "cbor"
    with pytest.raises(InvalidEncoding) as info:
        parse_encoding("msgpack")
    assert info.value.qualified_code == "request/invalid_encoding"
