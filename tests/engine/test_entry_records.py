"""Version 4: one record per entry, with its metadata and the names it brought.

A step under a new name used to write three records (its name, the entry,
its metadata); now one. The names a flush registers ride in the record of
its first new entry, and move to the registry's own rows when that record
goes (docs/storage-format.md, "Names").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from django_rivet.engine import keys, schema, upgrades
from django_rivet.engine.limits import MAX_KV_BATCH_PAYLOAD_BYTES
from django_rivet.engine.storage import Storage

from .helpers import RecordingDriver

FIXTURES = Path(__file__).parent / "fixtures"


class AtomicDriver(RecordingDriver):
    atomic_batch = True


def families(driver: RecordingDriver) -> dict[int, list[bytes]]:
    found: dict[int, list[bytes]] = {}
    for key in sorted(driver.kv):
        found.setdefault(keys.unpack(key)[0], []).append(key)
    return found


def name_rows(driver: RecordingDriver) -> dict[int, str]:
    return {
        keys.unpack(key)[1]: schema.decode_name(value)
        for key, value in driver.kv.items()
        if keys.unpack(key)[0] == keys.NAMES
    }


async def test_a_step_under_a_new_name_is_one_record(clock):
    driver = RecordingDriver()
    storage = Storage(driver)
    entry = storage.create_entry((storage.register_name("charge"),), "step", {})
    storage.update(entry, "", meta={"status": "completed"}, output="ch_1")
    await storage.flush()
    assert driver.batches == [[(keys.entry_key((0,)), driver.kv[entry.key])]]
    stored, metadata = schema.decode_entry_record(driver.kv[entry.key], (0,))
    assert stored.carried == [0, "charge"] and stored.data == {"output": "ch_1"}
    assert metadata is not None and metadata.status == "completed"
    assert upgrades.record_version(driver.kv[entry.key]) == upgrades.SCHEMA_VERSION
    reloaded = await Storage.load(driver)
    assert reloaded.names == ["charge"]
    assert reloaded.metadata[entry.id].status == "completed"
    assert reloaded.entries[(0,)].carried == [0, "charge"]


async def test_the_names_of_a_flush_go_with_its_first_new_entry(clock):
    driver = RecordingDriver()
    storage = Storage(driver)
    first = storage.create_entry((storage.register_name("a"),), "step", {})
    second = storage.create_entry((storage.register_name("b"),), "step", {})
    await storage.flush()
    assert (first.carried, second.carried) == ([0, "a", "b"], None)
    assert set(families(driver)) == {keys.ENTRIES}
    # A later flush's new names go with its own first new entry.
    third = storage.create_entry((storage.register_name("c"),), "step", {})
    await storage.flush()
    assert third.carried == [2, "c"]
    assert (await Storage.load(driver)).names == ["a", "b", "c"]


async def test_names_without_a_new_entry_in_their_flush_go_to_the_registry(clock):
    driver = RecordingDriver()
    storage = Storage(driver)
    entry = storage.create_entry((storage.register_name("a"),), "step", {})
    await storage.flush()
    storage.register_name("unused")
    storage.meta(entry).attempts = 2
    storage.meta(entry).touch()  # the entry's record is written again
    await storage.flush()
    assert name_rows(driver) == {1: "unused"}
    assert entry.carried == [0, "a"]  # it keeps bringing its own
    reloaded = await Storage.load(driver)
    assert reloaded.names == ["a", "unused"]
    assert reloaded.metadata[entry.id].attempts == 2


@pytest.mark.parametrize("driver_class", [RecordingDriver, AtomicDriver])
@pytest.mark.parametrize("how", ["prune", "replay", "subtree"])
async def test_names_an_entry_brought_stay_when_it_goes(clock, driver_class, how):
    driver = driver_class()
    storage = Storage(driver)
    loop = storage.register_name("loop")
    first = None
    for iteration in range(3):
        step = (loop, (loop, iteration), storage.register_name("s"))
        entry = storage.create_entry(step, "step", {"output": iteration})
        first = first or entry
        await storage.flush()
    assert first.carried == [0, "loop", "s"] and name_rows(driver) == {}
    if how == "prune":
        storage.delete_iterations((loop,), loop, 0, 1)
    elif how == "replay":
        storage.delete_entry(first.location)
    else:
        storage.delete_subtree((loop, (loop, 0)))
    await storage.flush()
    assert keys.entry_key(first.location) not in driver.kv
    # The flush that deleted it wrote its names to the registry.
    assert name_rows(driver) == {0: "loop", 1: "s"}
    reloaded = await Storage.load(driver)
    assert reloaded.names == ["loop", "s"]
    assert [reloaded.location_string(loc) for loc in reloaded.entries] == [
        "loop/~1/s",
        "loop/~2/s",
    ]


async def test_a_lost_deletion_of_an_entry_that_brought_names_keeps_them(clock):
    driver = RecordingDriver()
    storage = Storage(driver)
    loop = storage.register_name("loop")
    storage.create_entry((loop,), "loop", {"pruned_before": 0})
    await storage.flush()  # the loop's entry brings "loop"
    s = storage.register_name("s")
    old = storage.create_entry((loop, (loop, 0), s), "step", {"output": 0})
    await storage.flush()  # iteration 0's step brings "s"
    assert old.carried == [1, "s"]
    storage.create_entry((loop, (loop, 1), s), "step", {"output": 1})
    storage.update(storage.entries[(loop,)], "", pruned_before=1)
    await storage.flush()  # the prune is recorded; its range delete is lost
    reloaded = await Storage.load(driver)
    assert list(reloaded.entries) == [(loop,), (loop, (loop, 1), s)]
    assert reloaded.names == ["loop", "s"]  # "s" from the left-over's record
    await reloaded.flush()  # deletes the left-over again, keeping "s"
    assert keys.entry_key(old.location) not in driver.kv
    assert name_rows(driver) == {1: "s"}
    again = await Storage.load(driver)
    assert again.location_string((loop, (loop, 1), s)) == "loop/~1/s"


async def test_a_failed_flush_brings_the_names_again(clock):
    class FailsOnce(RecordingDriver):
        fail = True

        async def batch(self, writes):
            if self.fail:
                self.fail = False
                raise OSError("batch failed")
            await super().batch(writes)

    driver = FailsOnce()
    storage = Storage(driver)
    first = storage.create_entry((storage.register_name("a"),), "step", {})
    with pytest.raises(Exception, match="batch failed"):
        await storage.flush()
    storage.create_entry((storage.register_name("b"),), "step", {})
    await storage.flush()
    assert first.carried == [0, "a", "b"]
    assert (await Storage.load(driver)).names == ["a", "b"]


async def test_names_that_would_make_a_record_too_large_go_to_the_registry(clock):
    driver = RecordingDriver()
    storage = Storage(driver)
    location = (storage.register_name("big"),)
    entry = storage.create_entry(location, "step", {})
    key = keys.entry_key(location)
    storage.update(entry, "", output=b"")
    base = len(schema.encode_entry(entry, storage.meta(entry), names=False))
    # An output that leaves 2 bytes (a long byte string's head is 4 bytes
    # longer than an empty one's): it fits, its name would not.
    size = MAX_KV_BATCH_PAYLOAD_BYTES - 2 - len(key) - base - 4
    storage.update(entry, "", output=b"x" * size)
    await storage.flush()
    assert entry.carried is None
    assert name_rows(driver) == {0: "big"}
    assert len(key) + len(driver.kv[key]) <= MAX_KV_BATCH_PAYLOAD_BYTES


async def test_an_entry_written_before_version_4_drops_its_metadata_record(clock):
    rows = schema.loads((FIXTURES / "v3" / "kv_rows.cbor").read_bytes())
    driver = RecordingDriver()
    driver.kv.update((bytes(k), bytes(v)) for k, v in rows)
    driver._sorted = sorted(driver.kv)
    metadata_key = keys.metadata_key("e-step")
    assert metadata_key in driver.kv
    storage = await Storage.load(driver)
    entry = storage.entries[(0,)]
    assert entry.split and storage.metadata["e-step"].attempts == 2
    storage.meta(entry).attempts = 3
    storage.meta(entry).touch()
    await storage.flush()
    assert metadata_key not in driver.kv
    assert upgrades.record_version(driver.kv[entry.key]) == upgrades.SCHEMA_VERSION
    untouched = keys.entry_key((2,))
    assert upgrades.record_version(driver.kv[untouched]) == 3
    reloaded = await Storage.load(driver)
    assert reloaded.metadata["e-step"].attempts == 3
    assert reloaded.metadata["e-step"].status == "completed"
    assert not reloaded.entries[(0,)].split and reloaded.entries[(2,)].split
