"""Storage.flush: one write list, chunking, deletions, and dirty markers."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_rivet.clock import freeze_time
from django_rivet.engine import (
    InMemoryDriver,
    StorageError,
    StorageLimitError,
    keys,
    loading,
    schema,
)
from django_rivet.engine.storage import (
    MAX_CONCURRENT_DELETES,
    MAX_KV_BATCH_ENTRIES,
    MAX_KV_BATCH_PAYLOAD_BYTES,
    Storage,
    chunk_writes,
)

from .helpers import RecordingDriver


class AtomicDriver(RecordingDriver):
    atomic_batch = True


class FailingDriver(RecordingDriver):
    """Fails the n-th batch (1-based) and/or the deletes, once each."""

    def __init__(self, fail_batch: int | None = None, fail_delete: bool = False):
        super().__init__()
        self.fail_batch = fail_batch
        self.fail_delete = fail_delete

    async def batch(self, writes):
        if self.fail_batch is not None and len(self.batches) + 1 == self.fail_batch:
            self.fail_batch = None
            self.batches.append([])
            raise OSError("batch failed")
        await super().batch(writes)

    async def atomic_flush(self, writes, deletions):
        # The whole flush is one unit: it fails (and writes nothing) when
        # its first batch or its deletes would have.
        if self.fail_batch == 1 or (self.fail_delete and deletions):
            self.fail_batch, self.fail_delete = None, False
            raise OSError("transaction failed")
        await super().atomic_flush(writes, deletions)

    async def delete_range(self, start, end):
        if self.fail_delete:
            self.fail_delete = False
            raise OSError("delete failed")
        await super().delete_range(start, end)

    async def batch_delete(self, keys_):
        if self.fail_delete:
            self.fail_delete = False
            raise OSError("delete failed")
        await super().batch_delete(keys_)


def snapshot(storage: Storage) -> dict:
    """Everything a reload must reproduce."""
    return {
        "names": list(storage.names),
        "entries": {
            loc: (e.id, e.kind, e.seq, e.data) for loc, e in storage.entries.items()
        },
        "metadata": {
            entry_id: (m.status, m.attempts, m.created_at, m.error)
            for entry_id, m in storage.metadata.items()
        },
        "state": storage.state,
    }


async def test_atomic_drivers_get_the_whole_write_list_in_one_call(clock):
    driver = AtomicDriver()
    storage = Storage(driver)
    for index in range(129):
        storage.register_name(f"name-{index}")
    await storage.flush()
    assert [len(batch) for batch in driver.batches] == [129]
    assert driver.calls == ["atomic_flush"]


async def test_other_drivers_get_chunks_of_at_most_128_writes(clock):
    driver = RecordingDriver()
    storage = Storage(driver)
    for index in range(129):
        storage.register_name(f"name-{index}")
    await storage.flush()
    assert [len(batch) for batch in driver.batches] == [128, 1]
    reloaded = await Storage.load(driver)
    assert reloaded.names == storage.names


async def test_large_writes_are_split_by_bytes_and_reload_faithfully(clock):
    driver = RecordingDriver()
    storage = Storage(driver)
    for index in range(9):
        location = (storage.register_name(f"big-{index}"),)
        entry = storage.create_entry(location, "step", {})
        entry.data["output"] = bytes([index]) * (120 * 1024)
    await storage.flush()
    assert len(driver.batches) > 1
    for batch in driver.batches:
        assert len(batch) <= MAX_KV_BATCH_ENTRIES
        assert sum(len(k) + len(v) for k, v in batch) <= MAX_KV_BATCH_PAYLOAD_BYTES
    # A flush of more than one batch writes its new names to the registry
    # (a batch cut short must not leave an entry without its names); each
    # entry is one record with its metadata.
    assert sum(len(batch) for batch in driver.batches) == 9 * 2
    reloaded = await Storage.load(driver)
    assert snapshot(reloaded) == snapshot(storage)


async def test_a_write_over_the_byte_limit_raises_before_anything_is_written(clock):
    driver = RecordingDriver()
    storage = Storage(driver)
    storage.register_name("small")
    location = (storage.register_name("huge"),)
    entry = storage.create_entry(location, "step", {})
    entry.data["output"] = b"x" * MAX_KV_BATCH_PAYLOAD_BYTES
    with pytest.raises(StorageLimitError) as caught:
        await storage.flush()
    encoded = schema.encode_entry(entry, storage.metadata[entry.id])
    size = len(keys.entry_key(location)) + len(encoded)
    assert str(caught.value) == (
        f"KV batch write is {size} bytes, exceeding the 999424 byte limit"
    )
    assert driver.batches == [] and driver.kv == {}
    assert entry.dirty


def test_chunking_keeps_order_and_limits():
    writes = [(b"k%d" % i, b"v" * (i * 997 % 300_000)) for i in range(300)]
    chunks = chunk_writes(writes)
    assert [w for chunk in chunks for w in chunk] == writes
    for chunk in chunks:
        assert len(chunk) <= MAX_KV_BATCH_ENTRIES
        assert sum(len(k) + len(v) for k, v in chunk) <= MAX_KV_BATCH_PAYLOAD_BYTES


async def test_a_failed_batch_keeps_every_dirty_marker_and_the_next_flush_succeeds(
    clock,
):
    driver = FailingDriver(fail_batch=2)
    storage = Storage(driver)
    entries = []
    for index in range(200):
        location = (storage.register_name(f"step-{index}"),)
        entries.append(storage.create_entry(location, "step", {"output": index}))
    storage.state = "running"
    with pytest.raises(StorageError):
        await storage.flush()
    assert all(entry.dirty for entry in entries)
    assert all(storage.metadata[e.id].dirty for e in entries)
    assert storage.dirty
    written_before = sum(len(b) for b in driver.batches)
    await storage.flush()
    assert not storage.dirty
    rewritten = sum(len(b) for b in driver.batches) - written_before
    # The names (in the registry: more than one batch), the entries (each
    # with its metadata), the state.
    assert rewritten == 200 + 200 + 1
    assert snapshot(await Storage.load(driver)) == snapshot(storage)


async def test_nothing_dirty_means_no_driver_call(clock):
    driver = RecordingDriver()
    storage = Storage(driver)
    storage.state = "running"
    await storage.flush()
    await storage.flush()
    reloaded = await Storage.load(driver)
    reloaded.state = "running"
    await reloaded.flush()
    assert len(driver.batches) == 1


async def test_deletions_run_after_writes_with_keys_in_chunks_of_128(clock):
    driver = RecordingDriver()
    storage = Storage(driver)
    loop = storage.register_name("loop")
    for iteration in range(300):
        location = (loop, (loop, iteration), storage.register_name("s"))
        storage.create_entry(location, "step", {"output": iteration})
    await storage.flush()
    driver.calls.clear()
    storage.delete_iterations((loop,), loop, 0, 290)
    storage.delete_subtree((loop, (loop, 295)))
    storage.state = "running"
    await storage.flush()
    assert driver.calls[0] == "batch"
    # No metadata records of their own to delete (version 4).
    assert sorted(driver.calls[1:]) == ["delete_prefix", "delete_range"]
    assert len(storage.entries) == 9
    assert snapshot(await Storage.load(driver)) == snapshot(storage)
    assert not storage.pending_keys and not storage.pending_ranges


async def test_at_most_64_deletions_are_in_flight(clock):
    class SlowDeletes(InMemoryDriver):
        in_flight = 0
        peak = 0

        async def delete_prefix(self, prefix):
            SlowDeletes.in_flight += 1
            SlowDeletes.peak = max(SlowDeletes.peak, SlowDeletes.in_flight)
            for _ in range(3):
                await asyncio.sleep(0)
            SlowDeletes.in_flight -= 1
            await super().delete_prefix(prefix)

    storage = Storage(SlowDeletes())
    for index in range(200):
        storage.delete_subtree((storage.register_name(f"branch-{index}"),))
    await storage.flush()
    assert SlowDeletes.peak == MAX_CONCURRENT_DELETES


async def test_a_failed_delete_keeps_pending_deletions_and_markers(clock):
    driver = FailingDriver(fail_delete=True)
    storage = Storage(driver)
    loop = storage.register_name("loop")
    for iteration in range(4):
        storage.create_entry((loop, (loop, iteration)), "step", {})
    await storage.flush()
    storage.delete_iterations((loop,), loop, 0, 2)
    marker = storage.create_entry((storage.register_name("after"),), "step", {})
    with pytest.raises(StorageError):
        await storage.flush()
    assert marker.dirty and storage.pending_ranges
    await storage.flush()
    assert not storage.dirty
    # The first iteration's record brought the name "loop": it went with
    # the iteration, the registry holds it now.
    assert keys.name_key(loop) in driver.kv
    assert snapshot(await Storage.load(driver)) == snapshot(storage)


async def test_unchanged_workflow_fields_are_not_rewritten(clock):
    driver = RecordingDriver()
    storage = Storage(driver)
    storage.state = "running"
    storage.set_field(keys.WORKFLOW_INPUT, {"a": [1, 2]})
    await storage.flush()
    storage.set_field(keys.WORKFLOW_INPUT, {"a": [1, 2]})  # equal, new object
    storage.state = "running"
    await storage.flush()
    assert len(driver.batches) == 1


async def test_transactional_writes_are_acknowledged_only_when_told(clock):
    driver = RecordingDriver()
    storage = Storage(driver)
    entry = storage.create_entry((storage.register_name("s"),), "step", {})
    writes, plan = storage.transactional_writes()
    assert len(writes) == 1 and entry.dirty  # the entry, its metadata and name
    await driver.batch(writes)
    storage.acknowledge(plan)
    assert not entry.dirty and not storage.dirty


async def test_changes_made_during_a_flush_stay_dirty(clock):
    class Interleaving(InMemoryDriver):
        hook = None

        async def batch(self, writes):
            if self.hook:
                self.hook()
            await super().batch(writes)

    driver = Interleaving()
    storage = Storage(driver)
    entry = storage.create_entry((storage.register_name("s"),), "step", {})

    def change():
        entry.data["output"] = "late"
        entry.touch()

    driver.hook = change
    await storage.flush()
    driver.hook = None
    assert entry.dirty
    await storage.flush()
    assert (await Storage.load(driver)).entries[entry.location].data["output"] == "late"


# --- property: acknowledged entries are never lost --------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.integers(0, 40), st.booleans()),
        st.tuples(st.just("update"), st.integers(0, 40), st.booleans()),
        st.tuples(st.just("prune"), st.integers(0, 6), st.integers(0, 6)),
        st.tuples(st.just("drop"), st.integers(0, 6), st.just(False)),
        st.tuples(
            st.just("flush"),
            st.one_of(st.none(), st.integers(1, 4)),
            st.booleans(),
        ),
    ),
    max_size=25,
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(operations, st.booleans())
def test_flushes_and_injected_failures_never_lose_an_acknowledged_entry(ops, atomic):
    asyncio.run(_exercise(ops, atomic))


async def _exercise(ops, atomic):
    with freeze_time(1_000):
        driver = FailingDriver()
        driver.atomic_batch = atomic
        storage = Storage(driver)
        loop = storage.register_name("loop")
        for op, a, b in ops:
            if op == "create":
                location = (loop, (loop, a % 7), storage.register_name(f"s{a}"))
                if location not in storage.entries:
                    size = 300_000 if b else 10
                    storage.create_entry(location, "step", {"output": b"x" * size})
            elif op == "update":
                for location, entry in storage.entries.items():
                    if location[-1] == storage.name_index(f"s{a}"):
                        entry.data["output"] = [a, b]
                        entry.touch()
            elif op == "prune":
                low, high = sorted((a, b))
                storage.delete_iterations((loop,), loop, low, high)
            elif op == "drop":
                storage.delete_subtree((loop, (loop, a)))
            else:
                driver.fail_batch, driver.fail_delete = a, b
                try:
                    await storage.flush()
                except StorageError:
                    continue
                assert snapshot(await Storage.load(driver)) == snapshot(storage)
        driver.fail_batch, driver.fail_delete = None, False
        await storage.flush()
        assert not storage.dirty
        assert snapshot(await Storage.load(driver)) == snapshot(storage)


async def test_a_new_entry_inside_a_pending_range_delete_survives_it(clock):
    driver = AtomicDriver()
    storage = Storage(driver)
    loop = storage.register_name("loop")
    old = storage.create_entry((loop, (loop, 0)), "step", {"output": "old"})
    await storage.flush()
    storage.delete_iterations((loop,), loop, 0, 1)
    new = storage.create_entry((loop, (loop, 0), loop), "step", {"output": "new"})
    await storage.flush()
    reloaded = await Storage.load(driver)
    assert old.location not in reloaded.entries
    assert reloaded.entries[new.location].data == {"output": "new"}


async def _loaded(kv: dict[bytes, bytes]) -> Storage:
    driver = InMemoryDriver()
    for key, value in kv.items():
        await driver.set(key, value)
    return await Storage.load(driver)


async def test_loading_keeps_name_slots_where_they_were():
    storage = await _loaded(
        {
            keys.name_key(0): schema.encode_name("a"),
            keys.name_key(2): schema.encode_name("c"),  # slot 1 lost
            keys.name_key(3): schema.encode_name("a"),  # a name twice
        }
    )
    assert storage.names == ["a", "#1", "c", "a"]
    assert storage.name_index("a") == 0 and storage.name_index("c") == 2
    assert storage.register_name("d") == 4


@pytest.mark.parametrize("enabled", [True, False])
async def test_loading_pauses_the_garbage_collector_and_leaves_it_as_it_was(
    enabled, monkeypatch
):
    import gc

    seen = []
    decode = loading.decode_entries

    def spy(records, locations):
        seen.append(gc.isenabled())
        return decode(records, locations)

    monkeypatch.setattr(loading, "decode_entries", spy)
    name = schema.encode_name("s")
    entry = schema.Entry("e1", "step", (0,), 1, {"output": 1})
    record = schema.encode_entry(entry, schema.EntryMetadata())
    kv = {keys.name_key(0): name, keys.entry_key((0,)): record}
    was = gc.isenabled()
    if not enabled:
        gc.disable()
    try:
        storage = await _loaded(kv)
        assert gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()
    assert seen == [False]
    assert storage.entries[(0,)].data == {"output": 1}


@pytest.mark.parametrize("enabled", [True, False])
async def test_planning_a_flush_pauses_the_garbage_collector_and_leaves_it_as_it_was(
    enabled, monkeypatch
):
    import gc

    seen = []
    encode = schema.encode_entry

    def spy(entry, data=None):
        seen.append(gc.isenabled())
        return encode(entry, data)

    monkeypatch.setattr(schema, "encode_entry", spy)
    driver = InMemoryDriver()
    storage = Storage(driver)
    storage.create_entry((storage.register_name("s"),), "step", {"output": 1})
    was = gc.isenabled()
    if not enabled:
        gc.disable()
    try:
        await storage.flush()
        assert gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()
    assert seen == [False]
    assert (await Storage.load(driver)).entries[(0,)].data == {"output": 1}
