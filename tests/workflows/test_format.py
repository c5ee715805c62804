"""Workflow histories stored by an older schema version resume under this one.

Version 4 (an entry's record holds its metadata and the names it brought)
is what this code writes; a history written in version 3 (compact name,
entry and metadata records, three per entry) or version 2 (every record an
envelope map) must keep working after an upgrade: it loads, replays without
running recorded steps again, takes new work, and its changed records are
written back in version 4 (their metadata records deleted) while untouched
ones stay as they were. Both databases (the DjangoDriver rows), in the
SQLite leg and the PostgreSQL leg of the suite.
"""

from __future__ import annotations

import pytest

from django_rivet import workflows
from django_rivet.engine import keys, schema, upgrades, workflow
from django_rivet.models import WorkflowKV
from django_rivet.testing import run_until_idle
from django_rivet.workflows import registry

# pg: the PostgreSQL leg runs this module (older histories resume under
# this version on each database).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

RAN: list[str] = []


def side_effect(name: str, value):
    RAN.append(name)
    return value


@workflow(name="formatUpgrade")
async def format_upgrade(ctx, input):
    total = 0
    for index in range(input["steps"]):
        total += await ctx.step(f"add{index}", lambda i=index: side_effect("add", i))
    message = await ctx.messages.next("go")
    extra = await ctx.step("extra", lambda: side_effect("extra", 100))
    return {"total": total + extra, "body": message.body}


def as_older(version: int, rows: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """Rewrite stored rows as ``version`` (2 or 3) wrote them.

    Each entry's record splits into the entry, its metadata record and the
    registry's rows of the names it brought; version 2 wrote envelope maps,
    version 3 compact arrays.
    """
    out: dict[bytes, bytes] = {}
    for key, value in rows.items():
        family = keys.unpack(key)[0]
        if family == keys.NAMES:
            out[key] = _name(version, schema.decode_name(value))
        elif family == keys.ENTRIES:
            entry, metadata = schema.decode_entry_record(value)
            assert metadata is not None  # written by this code: version 4
            for offset, name in enumerate((entry.carried or [0])[1:]):
                index = entry.carried[0] + offset
                out[keys.name_key(index)] = _name(version, name)
            meta = {f: getattr(metadata, f) for f in schema._METADATA_FIELDS}
            fields = [entry.id, entry.seq, entry.kind, entry.data]
            if version == 3:
                out[key] = schema.dumps([3, *fields])
                out[keys.metadata_key(entry.id)] = schema.dumps([3, *meta.values()])
            else:
                named = dict(zip(("id", "seq", "kind", "data"), fields, strict=True))
                out[key] = schema.dumps({"v": 2, "type": "entry", **named})
                out[keys.metadata_key(entry.id)] = schema.dumps(
                    {"v": 2, "type": "metadata", **meta}
                )
        else:  # workflow fields and published values: envelope maps
            fields = {k: v for k, v in schema.loads(value).items() if k != "v"}
            out[key] = schema.dumps({"v": version, **fields})
    return out


def _name(version: int, name: str) -> bytes:
    if version == 3:
        return schema.dumps([3, name])
    return schema.dumps({"v": 2, "type": "name", "name": name})


def stored(workflow_id: str) -> dict[bytes, bytes]:
    rows = WorkflowKV.objects.filter(workflow_id=workflow_id)
    return {bytes(row.key): bytes(row.value) for row in rows}


@pytest.mark.parametrize("version", [2, 3])
def test_an_older_history_resumes_under_this_version(version):
    RAN.clear()
    current = upgrades.SCHEMA_VERSION
    with registry.register_temporarily(format_upgrade):
        handle = workflows.start("formatUpgrade", {"steps": 3})
        assert run_until_idle(handle) == "sleeping"  # waits for "go"
        assert RAN == ["add", "add", "add"]
        written = stored(handle.workflow_id)
        assert {upgrades.record_version(v) for v in written.values()} == {current}
        # This version writes no metadata records of their own.
        assert not [k for k in written if keys.unpack(k)[0] == keys.METADATA]
        # The history as the older version left it.
        before = as_older(version, written)
        WorkflowKV.objects.filter(workflow_id=handle.workflow_id).delete()
        WorkflowKV.objects.bulk_create(
            WorkflowKV(workflow_id=handle.workflow_id, key=k, value=v)
            for k, v in before.items()
        )
        assert {upgrades.record_version(v) for v in before.values()} == {version}

        handle.send("go", {"ok": True})
        assert run_until_idle(handle) == "completed"

    # Replayed: the recorded steps did not run again; the new one ran once.
    assert RAN == ["add", "add", "add", "extra"]
    assert handle.result() == {"total": 0 + 1 + 2 + 100, "body": {"ok": True}}
    after = stored(handle.workflow_id)
    add0 = keys.entry_key((before_index(before, "add0"),))
    go = keys.entry_key((before_index(before, "go"),))
    # Untouched records keep their version and still decode; what changed
    # (the message wait, the workflow state) and what is new is this one's.
    assert upgrades.record_version(after[add0]) == version
    assert keys.metadata_key(schema.decode_entry(after[add0]).id) in after
    assert upgrades.record_version(after[go]) == current
    state = keys.workflow_key(keys.WORKFLOW_STATE)
    assert upgrades.record_version(after[state]) == current
    versions = {upgrades.record_version(v) for v in after.values()}
    assert versions == {version, current}
    # The wait's record holds its metadata now: its old record went.
    assert keys.metadata_key(schema.decode_entry(after[go]).id) not in after
    history = handle.history()
    assert [(h.location, h.status) for h in history] == [
        ("add0", "completed"),
        ("add1", "completed"),
        ("add2", "completed"),
        ("go", "completed"),
        ("extra", "completed"),
    ]


def before_index(rows: dict[bytes, bytes], name: str) -> int:
    """The name-registry index of ``name`` in stored rows."""
    for key, value in rows.items():
        parts = keys.unpack(key)
        if parts[0] == keys.NAMES and schema.decode_name(value) == name:
            return int(parts[1])
    raise AssertionError(f"no name {name!r}")
