"""The schema upgrade path runs: a test-only version 0, upgraded on read.

``fixtures/test_v0/`` holds records of a version 0 that never shipped (see
``fixtures/make_test_v0.py`` for how it differs from version 1). With its
upgrade function registered in ``upgrades.UPGRADES`` -- exactly what a real
version bump adds -- the real decoding path reads those bytes: the record
decoders, ``Storage.load``, ``decode_history``, and a workflow resumed from
a version 0 history by replay. Records the run changes are written back in
the current version; untouched ones stay version 0 and keep decoding.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from django_rivet.engine import (
    InMemoryDriver,
    Loop,
    SchemaError,
    decode_history,
    keys,
    read_history,
    read_workflow,
    run_workflow,
    schema,
    upgrades,
)

FIXTURES = Path(__file__).parent / "fixtures" / "test_v0"


def upgrade_v0(record: dict[str, Any]) -> dict[str, Any]:
    """Version 0 -> 1: the renames a real upgrade function would do."""
    record = {**record, "v": 1}
    if record["type"] == "entry":
        data = dict(record.get("data") or {})
        if record.get("kind") == "step" and "result" in data:
            data["output"] = data.pop("result")
        if record.get("kind") == "loop" and "committed" in data:
            data["iteration"] = data.pop("committed")
        record["data"] = data
    elif record["type"] == "metadata":
        if "tries" in record:
            record["attempts"] = record.pop("tries")
    elif record["type"] in ("state", "output", "error", "input"):
        record["value"] = record.pop("data", None)
    return record


@pytest.fixture
def with_v0(monkeypatch):
    monkeypatch.setitem(upgrades.UPGRADES, 0, upgrade_v0)


def fixture(name: str) -> bytes:
    return (FIXTURES / f"{name}.cbor").read_bytes()


def rows() -> list[tuple[bytes, bytes]]:
    return [(bytes(k), bytes(v)) for k, v in schema.loads(fixture("kv_rows"))]


def test_without_its_upgrade_an_old_version_is_refused():
    with pytest.raises(SchemaError, match="Unknown workflow schema version 0"):
        schema.decode_entry(fixture("entry_step"))


def test_a_newer_version_is_refused_with_a_clear_error():
    newer = schema.dumps(
        {"v": upgrades.SCHEMA_VERSION + 1, "type": "name", "name": "x"}
    )
    with pytest.raises(SchemaError, match="newer than this django-rivet"):
        schema.decode_name(newer)


def test_an_upgrade_must_produce_the_next_version(monkeypatch):
    monkeypatch.setitem(upgrades.UPGRADES, 0, lambda record: record)
    with pytest.raises(SchemaError, match="did not produce version 1"):
        schema.decode_entry(fixture("entry_step"))


def test_version_0_records_decode_through_the_upgrade(with_v0):
    entry = schema.decode_entry(fixture("entry_step"), (0,))
    assert (entry.id, entry.kind, entry.seq) == ("e-charge", "step", 1)
    assert entry.data == {"output": {"id": "ch_1"}}
    metadata = schema.decode_metadata(fixture("metadata"))
    assert (metadata.status, metadata.attempts) == ("completed", 1)


def test_version_0_history_decodes(with_v0):
    history = decode_history(rows())
    assert [(h.kind, h.location, h.status, h.output) for h in history] == [
        ("step", "charge", "completed", {"id": "ch_1"}),
        ("loop", "pages", "running", None),
        ("step", "pages/~2/fetch", "completed", 10),
    ]
    assert history[1].data["iteration"] == 2


async def test_a_workflow_recorded_in_version_0_resumes_by_replay(clock, with_v0):
    driver = InMemoryDriver()
    for key, value in rows():
        driver._put(key, value)
    ran = []

    async def body(ctx, total):
        value = await ctx.step("fetch", lambda: ran.append("fetch") or 10)
        total += value
        return Loop.break_(total) if total >= 40 else Loop.continue_(total)

    async def wf(ctx, input):
        charge = await ctx.step("charge", lambda: ran.append("charge") or "again")
        total = await ctx.loop("pages", body, state=0)
        notified = await ctx.step("notify", lambda: ran.append("notify") or True)
        return {"charge": charge["id"], "total": total, "n": input["n"], "ok": notified}

    outcome = await run_workflow("wf-old", wf, None, driver)
    assert outcome.state == "completed"
    # The version 0 history replayed: the charge and iteration 2's fetch
    # were not run again; the loop resumed at iteration 2 with state 20.
    assert outcome.output == {"charge": "ch_1", "total": 40, "n": 4, "ok": True}
    assert ran == ["fetch", "notify"]
    assert (await read_workflow(driver)).input == {"n": 4}
    # Changed records were written back in the current version, the
    # untouched ones are still version 0 -- and both decode.
    versions = {key: upgrades.record_version(value) for key, value in driver.kv.items()}
    assert versions[keys.entry_key((0,))] == 0  # the charge: untouched
    assert versions[keys.entry_key((1,))] == upgrades.SCHEMA_VERSION  # the loop
    assert versions[keys.workflow_key(keys.WORKFLOW_STATE)] == upgrades.SCHEMA_VERSION
    history = await read_history(driver)
    assert [h.location for h in history] == [
        "charge",
        "pages",
        "pages/~2/fetch",
        "pages/~3/fetch",
        "notify",
    ]
