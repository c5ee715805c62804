"""CBOR/JSON codecs: round trips, and untrusted input refused fast."""

import datetime
import re
import threading
import time
import uuid

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_rivet.encoding import (
    MAX_DEPTH,
    MAX_ENTRIES,
    OFFLOAD_BYTES,
    adecode,
    cbor_dumps,
    cbor_loads,
    decode,
    decode_message,
    encode,
    json_dumps,
    json_loads,
    parse_encoding,
    run_decoder,
)
from django_rivet.exceptions import (
    InvalidEncoding,
    InvalidValue,
    MalformedRequest,
    ValueTooDeep,
)

# Values every codec must carry: what actor state and action results hold.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
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
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
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


# -- untrusted input: only what JSON can carry (issue 17, findings 1, 4, 8) ------
MERSENNE_61 = 2**61 - 1  # int hashes are taken modulo this prime


def colliding_bignum_map(entries):
    """A CBOR map whose bignum keys all hash to 0 (quadratic to build as a dict)."""
    items = b"".join(
        cbor2.dumps((2**8 + n) * MERSENNE_61) + b"\x00" for n in range(entries)
    )
    return b"\xba" + entries.to_bytes(4, "big") + items


def test_colliding_bignum_keys_are_refused_before_a_dict_is_built():
    data = b"\xa1" + cbor2.dumps("args") + b"\x81" + colliding_bignum_map(5000)
    with pytest.raises(MalformedRequest, match="map key must be a text string"):
        decode(data, "cbor")


@pytest.mark.parametrize(
    "key",
    [1, -1, 2**70, 1.5, b"raw", (1, 2), True, None],
    ids=["int", "negative", "bignum", "float", "bytes", "array", "bool", "null"],
)
def test_cbor_map_keys_must_be_strings(key):
    with pytest.raises(MalformedRequest, match="map key"):
        decode(cbor2.dumps({key: 1}), "cbor")


def test_stored_values_have_string_keys_as_every_client_reads_them():
    # JSON would turn 1 into "1" and CBOR keep it: refused where it is written.
    with pytest.raises(InvalidValue) as info:
        cbor_dumps({"a": {1: "a"}}, "state")
    assert info.value.metadata["path"] == "state.a"


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        ("[1e999]", "json"),
        ("[-1e999]", "json"),
        ('{"x": NaN}', "json"),
        ("[Infinity]", "json"),
        ('["\\ud800"]', "json"),
        ('{"\\udfff": 1}', "json"),
        ("[" + "9" * 4301 + "]", "json"),
        (cbor2.dumps([float("nan")]), "cbor"),
        (cbor2.dumps([float("inf")]), "cbor"),
        (b"\x81\xf7", "cbor"),  # undefined
        (b"\x81\xf0", "cbor"),  # simple value 16
        (b"\x81\xf8\x20", "cbor"),  # simple value 32
        (cbor2.dumps([10**4300]), "cbor"),  # a bignum JSON cannot carry
    ],
    ids=[
        "overflow",
        "negative-overflow",
        "nan",
        "infinity",
        "lone-surrogate",
        "surrogate-key",
        "huge-int",
        "cbor-nan",
        "cbor-inf",
        "undefined",
        "simple",
        "simple-two-byte",
        "cbor-huge-int",
    ],
)
def test_values_json_cannot_carry_are_malformed(data, encoding):
    with pytest.raises(MalformedRequest):
        decode(data, encoding)


def test_undefined_is_admitted_only_when_asked():
    # The RivetKit client writes JavaScript's undefined as CBOR undefined.
    assert decode(b"\x81\xf7", "cbor", undefined=True) == [cbor2.undefined]


def nested(depth):
    value = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("encoding", ["json", "cbor"])
def test_one_depth_limit_for_what_comes_in_and_what_is_stored(encoding):
    deepest = nested(MAX_DEPTH)
    assert decode(encode(deepest, encoding), encoding) == deepest
    assert cbor_loads(cbor_dumps(deepest)) == deepest
    with pytest.raises(MalformedRequest, match="nest"):
        decode(encode(nested(MAX_DEPTH + 1), encoding), encoding)


def test_too_deep_values_are_refused_before_they_are_stored():
    with pytest.raises(ValueTooDeep) as info:
        cbor_dumps({"a": nested(MAX_DEPTH)})
    assert info.value.qualified_code == "actor/value_too_deep"
    assert isinstance(info.value, TypeError)  # callers handle unencodable values
    loop = []
    loop.append(loop)
    with pytest.raises(ValueTooDeep):
        cbor_dumps(loop)


def test_a_message_holds_a_bounded_number_of_entries():
    assert len(decode(cbor2.dumps([0] * MAX_ENTRIES), "cbor")) == MAX_ENTRIES
    for encoding in ("json", "cbor"):
        with pytest.raises(MalformedRequest, match="at most"):
            decode(encode([[0] * 1000] * (MAX_ENTRIES // 1000), encoding), encoding)


def test_decode_message_returns_value_problems_with_the_value():
    frame, problem = decode_message('{"type": "action", "id": 7, "x": NaN}', "json")
    assert frame["id"] == 7
    assert isinstance(problem, MalformedRequest)
    assert decode_message('{"id": 1}', "json") == ({"id": 1}, None)


async def test_large_bodies_are_decoded_off_the_event_loop():
    threads = []

    def decoder(data):
        threads.append(threading.current_thread())
        return len(data)

    assert await run_decoder(decoder, b"x" * 10) == 10
    assert await run_decoder(decoder, b"x" * (OFFLOAD_BYTES + 1)) == OFFLOAD_BYTES + 1
    assert threads[0] is threading.current_thread()
    assert threads[1] is not threading.current_thread()
    big = encode({"args": ["x" * OFFLOAD_BYTES]}, "json")
    assert (await adecode(big, "json"))["args"][0] == "x" * OFFLOAD_BYTES
