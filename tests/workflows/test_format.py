"""Workflow histories stored by an older schema version resume under this one.

Version 3 (compact name, entry and metadata records) is what this code
writes; a history written in version 2 (every record an envelope map) must
keep working after an upgrade: it loads, replays without running recorded
steps again, takes new work, and its changed records are written back in
version 3 while untouched ones stay as they were. Both databases (the
DjangoDriver rows), in the SQLite leg and the PostgreSQL leg of the suite.
"""

from __future__ import annotations

import pytest

from django_rivet import workflows
from django_rivet.engine import keys, schema, upgrades, workflow
from django_rivet.models import WorkflowKV
from django_rivet.testing import run_until_idle
from django_rivet.workflows import registry

# pg: the PostgreSQL leg runs this module (a version-2 history resumes
# under version 3 on each database).
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


def as_version_2(key: bytes, value: bytes) -> bytes:
    """Rewrite one stored record as version 2 wrote it (an envelope map)."""
    family = keys.unpack(key)[0]
    if family == keys.NAMES:
        fields = {"type": "name", "name": schema.decode_name(value)}
    elif family == keys.ENTRIES:
        entry = schema.decode_entry(value)
        fields = {
            "type": "entry",
            "id": entry.id,
            "seq": entry.seq,
            "kind": entry.kind,
            "data": entry.data,
        }
    elif family == keys.METADATA:
        metadata = schema.decode_metadata(value)
        fields = {
            "type": "metadata",
            "status": metadata.status,
            "error": metadata.error,
            "attempts": metadata.attempts,
            "last_attempt_at": metadata.last_attempt_at,
            "created_at": metadata.created_at,
            "completed_at": metadata.completed_at,
            "rollback_completed_at": metadata.rollback_completed_at,
            "rollback_error": metadata.rollback_error,
        }
    else:  # workflow fields and published values: already envelope maps
        fields = {k: v for k, v in schema.loads(value).items() if k != "v"}
    return schema.dumps({"v": 2, **fields})


def stored(workflow_id: str) -> dict[bytes, bytes]:
    rows = WorkflowKV.objects.filter(workflow_id=workflow_id)
    return {bytes(row.key): bytes(row.value) for row in rows}


def test_a_version_2_history_resumes_under_version_3():
    RAN.clear()
    with registry.register_temporarily(format_upgrade):
        handle = workflows.start("formatUpgrade", {"steps": 3})
        assert run_until_idle(handle) == "sleeping"  # waits for "go"
        assert RAN == ["add", "add", "add"]
        written = stored(handle.workflow_id)
        assert {upgrades.record_version(v) for v in written.values()} == {3}
        # The history as version 2 left it.
        for row in WorkflowKV.objects.filter(workflow_id=handle.workflow_id):
            row.value = as_version_2(bytes(row.key), bytes(row.value))
            row.save(update_fields=["value"])
        before = stored(handle.workflow_id)
        assert {upgrades.record_version(v) for v in before.values()} == {2}

        handle.send("go", {"ok": True})
        assert run_until_idle(handle) == "completed"

    # Replayed: the recorded steps did not run again; the new one ran once.
    assert RAN == ["add", "add", "add", "extra"]
    assert handle.result() == {"total": 0 + 1 + 2 + 100, "body": {"ok": True}}
    after = stored(handle.workflow_id)
    add0 = keys.entry_key((before_index(before, "add0"),))
    # Untouched records keep version 2 and still decode; what changed (the
    # message wait, the workflow state) and what is new is version 3.
    assert upgrades.record_version(after[add0]) == 2
    assert upgrades.record_version(after[keys.workflow_key(keys.WORKFLOW_STATE)]) == 3
    versions = {upgrades.record_version(v) for v in after.values()}
    assert versions == {2, 3}
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
