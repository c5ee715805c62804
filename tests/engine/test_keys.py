"""Tuple keys: FoundationDB tuple-layer encoding and the workflow key layout."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_rivet.engine import keys

ints = st.integers(min_value=-(2**200), max_value=2**200)
scalars = st.one_of(st.none(), ints, st.binary(max_size=12), st.text(max_size=12))
elements = st.recursive(
    scalars, lambda inner: st.tuples(inner) | st.tuples(inner, inner), max_leaves=6
)
tuples = st.lists(elements, max_size=5).map(tuple)


def _shape(value):
    """Type skeleton: two values of one shape compare like Python tuples."""
    if isinstance(value, tuple):
        return ("tuple", tuple(_shape(v) for v in value))
    return type(value).__name__


@st.composite
def same_shape_pairs(draw):
    shape_source = draw(st.lists(st.sampled_from(["int", "str", "bytes"]), max_size=4))
    makers = {
        "int": ints,
        "str": st.text(max_size=8),
        "bytes": st.binary(max_size=8),
    }

    def make():
        return tuple(draw(makers[kind]) for kind in shape_source)

    nested = draw(st.booleans())
    a, b = make(), make()
    if nested:
        a, b = (1, a, "x"), (1, b, "x")
    return a, b


@settings(max_examples=60, deadline=None)
@given(tuples)
def test_pack_round_trips(value):
    assert keys.unpack(keys.pack(value)) == value


@settings(max_examples=100, deadline=None)
@given(same_shape_pairs())
def test_byte_order_matches_tuple_order(pair):
    a, b = pair
    assert (keys.pack(a) < keys.pack(b)) == (a < b)
    assert (keys.pack(a) == keys.pack(b)) == (a == b)


@settings(max_examples=60, deadline=None)
@given(st.lists(ints, min_size=2, max_size=2))
def test_integers_of_any_size_and_sign_keep_their_order(pair):
    a, b = pair
    assert (keys.pack((a,)) < keys.pack((b,))) == (a < b)


@given(
    st.floats(allow_nan=False, allow_infinity=True),
    st.floats(allow_nan=False, allow_infinity=True),
)
def test_floats_keep_their_order(a, b):
    if a < b:
        assert keys.pack((a,)) < keys.pack((b,))
    assert keys.unpack(keys.pack((a,))) == (a,)


def test_booleans_round_trip_and_are_not_integers():
    assert keys.unpack(keys.pack((True, False, 1, 0))) == (True, False, 1, 0)
    assert keys.pack((True,)) != keys.pack((1,))


def test_types_order_by_type_code():
    ordered = [(None,), (b"a",), ("a",), ((1,),), (-5,), (0,), (5,), (1.5,), (True,)]
    packed = [keys.pack(v) for v in ordered]
    assert packed == sorted(packed)


@settings(max_examples=60, deadline=None)
@given(tuples, tuples)
def test_packed_prefix_is_a_byte_prefix_and_inside_range_of(prefix, rest):
    full = prefix + rest
    assert keys.pack(full).startswith(keys.pack(prefix))
    start, end = keys.range_of(prefix)
    if rest:
        assert start <= keys.pack(full) < end
    else:
        assert not (start <= keys.pack(full) < end)
        low, high = keys.range_of(prefix, include_prefix=True)
        assert low <= keys.pack(full) < high


@settings(max_examples=60, deadline=None)
@given(tuples, tuples)
def test_range_of_excludes_keys_outside_the_prefix(prefix, other):
    if other[: len(prefix)] == prefix:
        return
    start, end = keys.range_of(prefix)
    assert not (start <= keys.pack(other) < end)


def test_nested_none_and_zero_bytes_are_escaped():
    value = (b"a\x00b", "x\x00", (None, b"\x00", (None,)), None)
    assert keys.unpack(keys.pack(value)) == value
    assert keys.pack((b"\x00",)) < keys.pack((b"\x00\x00",)) < keys.pack((b"\x01",))


def test_known_encodings_match_the_foundationdb_tuple_layer():
    assert keys.pack((1,)) == b"\x15\x01"
    assert keys.pack((-1,)) == b"\x13\xfe"
    assert keys.pack((0,)) == b"\x14"
    assert keys.pack((None,)) == b"\x00"
    assert keys.pack(("hi",)) == b"\x02hi\x00"
    assert keys.pack((b"\x00",)) == b"\x01\x00\xff\x00"
    assert keys.pack(((None, 1),)) == b"\x05\x00\xff\x15\x01\x00"
    assert keys.pack((2**64,)) == b"\x1d\x09\x01" + b"\x00" * 8


def test_unpack_rejects_garbage():
    with pytest.raises(ValueError):
        keys.unpack(b"\x02unterminated")
    with pytest.raises(ValueError):
        keys.unpack(b"\x99")


def test_loop_iterations_of_one_loop_share_a_contiguous_range():
    loop = (3,)
    inside = [keys.entry_key((*loop, (3, i), 7)) for i in range(0, 12)]
    start = keys.entry_key((*loop, (3, 2)))
    end = keys.entry_key((*loop, (3, 9)))
    kept = [k for k in inside if start <= k < end]
    assert kept == inside[2:9]


def test_strinc_returns_the_first_key_past_a_prefix():
    assert keys.strinc(b"ab") == b"ac"
    assert keys.strinc(b"a\xff") == b"b"
    with pytest.raises(ValueError):
        keys.strinc(b"\xff")


segments = st.one_of(
    st.integers(0, 2**70),
    st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)),
)


@given(st.lists(segments, max_size=6), st.text(), st.integers(0, 2**70))
def test_the_fast_workflow_keys_are_the_packed_tuples(location, entry_id, index):
    location = tuple(location)
    assert keys.entry_key(location) == keys.pack((keys.ENTRIES, *location))
    assert keys.unpack_location(keys.entry_key(location), 2) == location
    assert keys.metadata_key(entry_id) == keys.pack((keys.METADATA, entry_id))
    assert keys.name_key(index) == keys.pack((keys.NAMES, index))
    assert keys.name_index_of(keys.name_key(index)) == index
    assert keys.entry_id_of(keys.metadata_key(entry_id)) == entry_id
