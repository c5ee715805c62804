"""The versioned CBOR schema: golden fixtures decode forever, unsafe input never."""

from __future__ import annotations

import asyncio
import operator
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_rivet.domain import MAX_DEPTH
from django_rivet.engine import (
    Message,
    SchemaError,
    StepOutputError,
    decode_history,
    ids,
    keys,
    loading,
    schema,
    upgrades,
)

FIXTURES = Path(__file__).parent / "fixtures"

WHEN = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
ORDER_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
ERROR = {"name": "ValueError", "message": "card declined", "kind": "exhausted"}

# What each v1 fixture must decode to, written out by hand.
V1_ENTRIES = {
    "entry_step": ("e-step", "step", 1, {
        "output": {"id": ORDER_ID, "at": WHEN, "cents": 2**70, "neg": -(2**70)},
    }),
    "entry_step_failed": ("e-step-failed", "step", 2, {"error": ERROR}),
    "entry_sleep": ("e-sleep", "sleep", 3, {
        "deadline": 1735787045.5, "state": "pending",
    }),
    "entry_loop": ("e-loop", "loop", 4, {
        "state": {"page": 3}, "iteration": 40, "pruned_before": 20, "output": 99,
    }),
    "entry_loop_step": ("e-loop-step", "step", 5, {"output": [1, 2.5, None]}),
    "entry_message": ("e-message", "message", 6, {
        "names": ["approve"], "count": 1, "deadline": None, "state": "received",
        "messages": [
            {"id": "m-1", "name": "approve", "body": {"by": "ann"}, "created_at": 5.0}
        ],
    }),
    "entry_rollback_checkpoint": ("e-checkpoint", "rollback_checkpoint", 7, {
        "name": "start",
    }),
    "entry_join": ("e-join", "join", 8, {"branches": {
        "label": {"status": "completed", "output": "L-1"},
        "email": {"status": "failed", "error": {"name": "OSError", "message": "smtp"}},
    }}),
    "entry_race": ("e-race", "race", 9, {"winner": "a", "branches": {
        "a": {"status": "completed", "output": b"\x00\xff"},
        "b": {"status": "cancelled"},
    }}),
    "entry_removed": ("e-removed", "removed", 10, {
        "original_type": "step", "original_name": "legacy",
    }),
    "entry_version_check": ("e-version", "version_check", 11, {"version": 2}),
}  # fmt: skip

V1_METADATA = {
    "metadata": {
        "status": "completed",
        "error": None,
        "attempts": 2,
        "last_attempt_at": 1735787040.25,
        "created_at": 1735787000.0,
        "completed_at": 1735787041.0,
        "rollback_completed_at": 1735787100.0,
        "rollback_error": None,
    },
    "metadata_failed": {
        "status": "exhausted",
        "error": ERROR,
        "attempts": 3,
        "last_attempt_at": 1735787040.0,
        "created_at": 1735787000.0,
        "completed_at": None,
        "rollback_completed_at": None,
        "rollback_error": "refund failed",
    },
}

V1_FIELDS = {
    "state": (keys.WORKFLOW_STATE, "rolling_back"),
    "output": (keys.WORKFLOW_OUTPUT, {"charge": "ch_1", "when": WHEN}),
    "error": (keys.WORKFLOW_ERROR, {"name": "CriticalError", "message": "invalid"}),
    "input": (keys.WORKFLOW_INPUT, {"order": ORDER_ID, "items": [1, 2]}),
}


def fixture(version: int, name: str) -> bytes:
    return (FIXTURES / f"v{version}" / f"{name}.cbor").read_bytes()


@pytest.mark.parametrize("name", sorted(V1_ENTRIES))
def test_v1_entry_fixtures_decode(name):
    entry = schema.decode_entry(fixture(1, name), (0,))
    assert (entry.id, entry.kind, entry.seq, entry.data) == V1_ENTRIES[name]
    assert not entry.dirty


@pytest.mark.parametrize("name", sorted(V1_METADATA))
def test_v1_metadata_fixtures_decode(name):
    metadata = schema.decode_metadata(fixture(1, name))
    decoded = {field: getattr(metadata, field) for field in V1_METADATA[name]}
    assert decoded == V1_METADATA[name]
    assert not metadata.dirty


@pytest.mark.parametrize("name", sorted(V1_FIELDS))
def test_v1_workflow_field_fixtures_decode(name):
    field_id, expected = V1_FIELDS[name]
    assert schema.decode_workflow_field(field_id, fixture(1, name)) == expected


def test_v1_name_fixture_decodes():
    assert schema.decode_name(fixture(1, "name")) == "charge"


def test_v1_kv_rows_decode_into_history():
    rows = schema.loads(fixture(1, "kv_rows"))
    history = decode_history((bytes(k), bytes(v)) for k, v in rows)
    assert [(h.kind, h.location, h.seq) for h in history] == [
        ("step", "charge", 1),
        ("loop", "sum", 4),
        ("step", "sum/~39/fetch", 5),
    ]
    step = history[0]
    assert step.status == "completed" and step.attempts == 2
    assert step.output["cents"] == 2**70
    assert history[1].status == "pending"  # no metadata row for it


TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "shop/workflows.py", line 12, in charge\n'
    "    return 1 / 0\n"
    "ZeroDivisionError: division by zero\n"
)

# What each record version 2 added must decode to, written out by hand.
V2_ENTRIES = {
    "entry_child": ("e-child", "child", 12, {
        "workflow": "ship", "child_id": "order-7/ship", "detached": False,
        "wait": True, "state": "completed", "output": {"label": "L-1"},
    }),
    "entry_child_failed": ("e-child-failed", "child", 13, {
        "workflow": "audit", "child_id": "audit-7", "detached": True,
        "wait": True, "state": "failed",
        "error": {"name": "CriticalError", "message": "no audit"},
    }),
    "entry_reply": ("e-reply", "reply", 14, {
        "message_id": "42", "value": {"ok": True},
    }),
    "entry_event": ("e-event", "event", 15, {
        "key": "progress", "value": {"done": 3},
    }),
    "entry_step_traceback": ("e-step-traceback", "step", 16, {"error": {
        "name": "ZeroDivisionError", "message": "division by zero",
        "kind": "failed", "traceback": TRACEBACK,
    }}),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(V2_ENTRIES))
def test_v2_entry_fixtures_decode(name):
    entry = schema.decode_entry(fixture(2, name), (0,))
    assert (entry.id, entry.kind, entry.seq, entry.data) == V2_ENTRIES[name]


@pytest.mark.parametrize("name", sorted(V1_ENTRIES))
def test_v1_entries_were_kept_as_they_were_by_version_2(name):
    # Version 2 only adds: the v1 records it writes differ in "v" alone.
    entry = schema.decode_entry(fixture(2, name), (0,))
    assert (entry.id, entry.kind, entry.seq, entry.data) == V1_ENTRIES[name]


def test_v2_published_values_decode():
    event = schema.decode_published("event", fixture(2, "published_event"))
    assert event == {"done": 3, "at": WHEN}
    assert schema.decode_published("reply", fixture(2, "published_reply")) == {
        "ok": True
    }
    with pytest.raises(SchemaError, match="Expected a 'reply' record"):
        schema.decode_published("reply", fixture(2, "published_event"))


def test_v2_cancellation_error_decodes_into_its_exception():
    from django_rivet.engine import WorkflowTimeout
    from django_rivet.engine.errors import error_from_info

    info = schema.decode_workflow_field(
        keys.WORKFLOW_ERROR, fixture(2, "error_cancelled")
    )
    error = error_from_info(info)
    assert isinstance(error, WorkflowTimeout)
    assert (error.qualified_code, error.reason) == ("workflow/timeout", "timeout")


def test_v2_kv_rows_decode_into_history_without_the_published_values():
    rows = schema.loads(fixture(2, "kv_rows"))
    history = decode_history((bytes(k), bytes(v)) for k, v in rows)
    assert [(h.kind, h.location, h.seq) for h in history] == [
        ("step", "charge", 1),
        ("loop", "sum", 4),
        ("step", "sum/~39/fetch", 5),
        ("child", "ship-child", 12),
        ("event", "event:progress", 15),
    ]
    assert history[3].output == {"label": "L-1"}
    assert history[4].output == {"done": 3}


def test_every_entry_kind_has_a_fixture_in_the_current_version():
    version = upgrades.SCHEMA_VERSION
    kinds = {
        schema.decode_entry(path.read_bytes()).kind
        for path in (FIXTURES / f"v{version}").glob("entry_*.cbor")
    }
    assert kinds == set(schema.ENTRY_KINDS)


def test_the_current_version_still_writes_its_fixtures_byte_for_byte():
    from .fixtures.make_fixtures import records

    for name, data in records().items():
        assert data == fixture(upgrades.SCHEMA_VERSION, name), name


@pytest.mark.parametrize("version", [1, 2])
def test_every_record_is_a_versioned_envelope(version):
    for path in (FIXTURES / f"v{version}").glob("*.cbor"):
        if path.stem == "kv_rows":
            continue
        record = cbor2.loads(path.read_bytes())
        assert record["v"] == version and isinstance(record["type"], str)


def test_version_3_writes_names_entries_and_metadata_as_compact_arrays():
    compact = ("name", "entry_", "metadata")
    for path in (FIXTURES / "v3").glob("*.cbor"):
        if path.stem == "kv_rows":
            continue
        record = cbor2.loads(path.read_bytes())
        if path.stem.startswith(compact):
            assert isinstance(record, list) and record[0] == 3, path.stem
        else:
            assert record["v"] == 3 and isinstance(record["type"], str), path.stem


@given(st.text(max_size=300) | st.sampled_from(["x" * 65535, "x" * 65536, "é" * 40000]))
@settings(max_examples=200, deadline=None)
def test_a_name_slot_is_cbor2s_encoding_of_the_version_and_the_name(name):
    # encode_name writes the bytes itself (a flush writes one per new name):
    # they must be the ones cbor2 writes, or old readers would not decode them.
    try:
        expected = cbor2.dumps([upgrades.SCHEMA_VERSION, name])
    except Exception as refused:  # a lone surrogate
        with pytest.raises(type(refused)):
            schema.encode_name(name)
        return
    assert schema.encode_name(name) == expected
    assert schema.decode_name(expected) == name


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_version_decodes_the_same_records(version):
    # What each version stored means the same thing in the current model.
    assert schema.decode_name(fixture(version, "name")) == "charge"
    step = schema.decode_entry(fixture(version, "entry_step"), (0,))
    assert (step.id, step.kind, step.seq) == ("e-step", "step", 1)
    assert step.data["output"]["cents"] == 2**70
    metadata = schema.decode_metadata(fixture(version, "metadata"))
    assert (metadata.status, metadata.attempts) == ("completed", 2)


def test_lazy_records_decode_on_first_use_and_keep_what_was_assigned():
    data = fixture(3, "entry_loop")
    entry = loading.lazy_entry(data, (2,))
    assert (entry.id, entry.seq, entry.kind) == ("e-loop", 4, "loop")
    assert entry.raw == data  # the data is not decoded yet
    assert entry.data["iteration"] == 40
    assert entry.raw is None  # decoded once
    metadata = loading.lazy_metadata(fixture(3, "metadata"))
    metadata.status = "running"  # assigned before anything was read
    assert metadata.attempts == 2
    assert metadata.status == "running"
    # A record the peek cannot vouch for is decoded at once, with its error.
    with pytest.raises(SchemaError, match="kind"):
        loading.lazy_entry(cbor2.dumps([3, "e", 1, "nope", {}]), (0,))
    # Older records have no compact header: decoded at once, same result.
    old = loading.lazy_entry(fixture(2, "entry_loop"), (2,))
    assert old.raw is None and old.data == entry.data


def _entry_fixtures() -> list[tuple[int, str]]:
    return [
        (version, path.stem)
        for version in (1, 2, 3, 4)
        for path in sorted((FIXTURES / f"v{version}").glob("entry_*.cbor"))
    ]


def _same(entry, other) -> bool:
    return (entry.id, entry.seq, entry.kind, entry.location, entry.data) == (
        other.id,
        other.seq,
        other.kind,
        other.location,
        other.data,
    ) and not entry.dirty


def test_decoding_a_loaded_history_at_once_gives_each_record_alone():
    # Every entry fixture of every version, mixed, in one call: the same
    # entries as decoding each record alone.
    found = _entry_fixtures()
    records = [fixture(version, name) for version, name in found]
    locations = [(index,) for index in range(len(records))]
    entries, metas = loading.decode_entries(records, locations)
    assert len(entries) == len(metas) == len(records) > 60
    for entry, meta, data, location in zip(
        entries, metas, records, locations, strict=True
    ):
        alone, alone_meta = schema.decode_entry_record(data, location)
        assert _same(entry, alone)
        assert (entry.carried, entry.split) == (alone.carried, alone.split)
        if alone_meta is None:
            assert meta is None and entry.split
        else:  # version 4: the metadata came with the entry
            fields = operator.attrgetter(*schema._METADATA_FIELDS)
            assert fields(meta) == fields(alone_meta)
            assert meta.owner is entry and not meta.dirty
    # Version-3 and -4 records are decoded now, not left for later.
    assert all(entry.raw is None for entry in entries)
    assert sum(meta is not None for meta in metas) == 18  # the v4 ones


@pytest.mark.parametrize(
    "bad",
    [
        b"\x85\x03",  # truncated: it would swallow the next record
        b"\xff",  # a stray break would end the joined array early
        cbor2.dumps([3, "e", 1, "step", {"x": 1}]) + b"\x01",  # trailing bytes
        cbor2.dumps([3, "e", 1, "step", {"x": 1}])[:-1],  # cut short
        cbor2.dumps([4, "e", 1, "step", {}, "done", *[None] * 7]),  # a bad status
        cbor2.dumps([4, "e", 1, "step", {}, "completed", *[None] * 7, [0]]),
        cbor2.dumps([4, "e", 1, "step", {}, "completed", *[None] * 7, ["a", "b"]]),
        cbor2.dumps([4, "e", 1, "step", {}, "completed", *[None] * 6]),  # short
    ],
)
@pytest.mark.parametrize("version", [3, 4])
def test_one_broken_record_among_many_decodes_as_it_does_alone(bad, version):
    good = fixture(version, "entry_step")
    records, locations = [good, bad, good], [(0,), (1,), (2,)]

    def outcome(decode):
        try:
            entries = decode()
            return [(e.id, e.seq, e.kind, e.location, e.data) for e in entries]
        except SchemaError as error:
            return str(error)

    alone = outcome(
        lambda: [
            loading.lazy_entry(d, at) for d, at in zip(records, locations, strict=True)
        ]
    )
    assert outcome(lambda: loading.decode_entries(records, locations)[0]) == alone


def test_unknown_versions_and_wrong_record_types_are_refused():
    with pytest.raises(SchemaError, match="version"):
        schema.decode_name(cbor2.dumps({"v": 99, "type": "name", "name": "x"}))
    with pytest.raises(SchemaError, match="Expected a 'metadata' record"):
        schema.decode_metadata(fixture(1, "entry_step"))
    with pytest.raises(SchemaError):
        schema.decode_entry(cbor2.dumps([1, 2]))
    with pytest.raises(SchemaError, match="newer"):
        schema.decode_entry(cbor2.dumps([5, "e", 1, "step", {}]))
    with pytest.raises(SchemaError, match="12 or 13 fields, found 4"):
        schema.decode_entry(cbor2.dumps([4, "e", 1, "step", {}]))
    with pytest.raises(SchemaError, match="status"):
        schema.decode_entry(cbor2.dumps([4, "e", 1, "step", {}, "x", *[None] * 7]))
    with pytest.raises(SchemaError, match="names"):
        schema.decode_entry(
            cbor2.dumps([4, "e", 1, "step", {}, "pending", *[None] * 7, [-1, "a"]])
        )
    with pytest.raises(SchemaError, match="fields"):
        schema.decode_metadata(cbor2.dumps([3, "completed"]))
    with pytest.raises(SchemaError, match="kind"):
        schema.decode_entry(cbor2.dumps({"v": 1, "type": "entry", "kind": "nope"}))


@pytest.mark.parametrize(
    "value",
    [
        cbor2.CBORTag(258, [1, 2]),  # set
        cbor2.CBORTag(4, [-1, 15]),  # decimal
        cbor2.CBORTag(28, "shared"),  # value sharing
        cbor2.CBORTag(55799, 1),  # self-describe
        cbor2.CBORTag(40000, "custom"),
    ],
)
def test_decoding_rejects_every_tag_but_datetime_bignum_and_uuid(value):
    data = cbor2.dumps({"v": 1, "type": "output", "value": value})
    with pytest.raises(SchemaError, match="not allowed"):
        schema.decode_workflow_field(keys.WORKFLOW_OUTPUT, data)


def test_roundtrip_returns_what_a_replay_sees():
    naive = datetime(2025, 1, 1, 12, 0)
    message = Message("m-1", "approve", (1, 2), 5.0)
    value = {"t": (1, 2), "when": naive, "m": message}
    assert schema.roundtrip(value) == {
        "t": [1, 2],
        "when": naive.replace(tzinfo=UTC),
        "m": {"id": "m-1", "name": "approve", "body": [1, 2], "created_at": 5.0},
    }


@pytest.mark.parametrize("value", [{1, 2}, object(), {(1, 2): 3}, "\ud800"])
def test_roundtrip_refuses_what_cannot_be_stored(value):
    with pytest.raises(StepOutputError):
        schema.roundtrip(value)


storable = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**100), max_value=2**100)
    | st.floats(allow_nan=False)
    | st.text(max_size=10)
    | st.binary(max_size=10)
    | st.uuids(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None)
@given(storable)
def test_cbor_round_trips_storable_values(value):
    assert schema.loads(schema.dumps(value)) == value
    assert schema.roundtrip(value) == value


def test_workflow_values_share_the_nesting_limit_of_actor_state():
    def nested(depth):
        value = []
        for _ in range(depth - 1):
            value = [value]
        return value

    assert schema.roundtrip(nested(MAX_DEPTH)) == nested(MAX_DEPTH)
    with pytest.raises(StepOutputError, match="nests more than"):
        schema.roundtrip(nested(MAX_DEPTH + 1))
    with pytest.raises(StepOutputError):
        schema.roundtrip(nested(5000))  # iterative: no RecursionError


def test_a_message_body_too_deep_to_read_back_is_refused_at_send():
    from django_rivet.engine import InMemoryDriver
    from django_rivet.engine.limits import encode_message_body

    def nested(depth):
        value = []
        for _ in range(depth - 1):
            value = [value]
        return value

    assert schema.loads(encode_message_body(nested(MAX_DEPTH))) == nested(MAX_DEPTH)
    for depth in (MAX_DEPTH + 1, 5000):  # iterative: no RecursionError
        with pytest.raises(TypeError, match="nests more than"):
            encode_message_body(nested(depth))
    with pytest.raises(TypeError, match="nests more than"):
        asyncio.run(InMemoryDriver().add_message("deep", nested(5000)))


def test_new_entry_ids_are_random_version_4_uuids_in_hex(monkeypatch):
    # The same ids uuid.uuid4().hex gave before: what older histories hold.
    made = {schema.new_entry_id() for _ in range(1000)}
    assert len(made) == 1000
    for entry_id in made:
        parsed = uuid.UUID(hex=entry_id)
        assert (parsed.hex, parsed.version, parsed.variant) == (
            entry_id,
            4,
            uuid.RFC_4122,
        )
    try:
        for pattern in (b"\x00", b"\xff", bytes(range(16))):
            data = pattern * (16 * 256 // len(pattern))
            monkeypatch.setattr("os.urandom", lambda size, data=data: data[:size])
            ids._random.drop()  # (the bytes read before are used up)
            for start in range(0, 16 * 300, 16):
                chunk = (data * 2)[start % len(data) :][:16]
                expected = uuid.UUID(bytes=chunk, version=4).hex
                assert schema.new_entry_id() == expected
    finally:
        # The patterned bytes left would give the next tests equal ids.
        ids._random.drop()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_process_makes_other_entry_ids_than_its_parent():
    schema.new_entry_id()  # the parent holds random bytes for more ids
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.write(write, schema.new_entry_id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    assert len(child) == 32
    assert child != schema.new_entry_id()
