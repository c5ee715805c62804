"""Deferred deletions survive crashes and failures; flushes are whole units.

Pruning writes a loop's ``pruned_before`` and deletes the old iterations;
a race writes its winner and deletes the losers. Those are separate driver
calls unless the driver is atomic, so these tests lose the deletion in
between (a failure, or a crash) and check the next run completes, deletes
the leftovers again, and that observers and atomic drivers see each flush
as one unit.
"""

from __future__ import annotations

import pytest

from django_rivet.engine import (
    InMemoryDriver,
    Loop,
    StorageError,
    keys,
    read_history,
    run_workflow,
    schema,
)
from django_rivet.engine.storage import Storage

from .helpers import RecordingDriver, execute, run_to_end


class DropsDeletes(RecordingDriver):
    """Fails (or silently loses, as a crash would) the next range/prefix delete."""

    def __init__(self, mode: str = "fail") -> None:
        super().__init__()
        self.mode = mode
        self.armed = False

    async def _lose(self) -> bool:
        if not self.armed:
            return False
        self.armed = False
        if self.mode == "fail":
            raise OSError("delete failed")
        return True

    async def delete_range(self, start, end):
        if not await self._lose():
            await super().delete_range(start, end)

    async def delete_prefix(self, prefix):
        if not await self._lose():
            await super().delete_prefix(prefix)


def counting_loop(executed, *, stop=6):
    async def body(ctx, state):
        executed.append(state)
        await ctx.step("s", lambda: state)
        if state >= stop:
            return Loop.break_(state)
        return Loop.continue_(state + 1)

    async def wf(ctx, _):
        return await ctx.loop("l", body, state=0, history_prune_interval=2)

    return wf


@pytest.mark.parametrize("loss", ["fail", "lost"])
async def test_a_pruning_delete_that_fails_or_is_lost_does_not_break_the_loop(
    clock, mode, loss
):
    """Issue 11 item 1: the old iterations were read back as divergence."""
    driver = DropsDeletes(loss)
    executed = []
    wf = counting_loop(executed)

    async def stop_at_four(ctx, _):
        async def body(ctx, state):
            executed.append(state)
            await ctx.step("s", lambda: state)
            if state == 3:
                driver.armed = True  # the prune after it loses its delete
            if state == 5:
                raise RuntimeError("the process dies here")
            return Loop.continue_(state + 1)

        return await ctx.loop("l", body, state=0, history_prune_interval=2)

    with pytest.raises(StorageError) if loss == "fail" else _nothing():
        first = await execute(clock, "wf-1", stop_at_four, driver, "yield")
        assert first.state == "failed"  # a plain exception in workflow code
    # The loop entry says "pruned before 2" yet iterations 0-1 are still
    # stored: they are not history, and the next run deletes them again.
    executed.clear()
    outcome = await execute(clock, "wf-1", wf, driver, mode)
    assert outcome.state == "completed" and outcome.output == 6
    assert executed[0] >= 2  # resumed, not restarted
    locations = [h.location for h in await read_history(driver)]
    assert locations == ["l", "l/~4/s", "l/~5/s", "l/~6/s"]
    left = [k for k in driver.kv if k.startswith(keys.pack((keys.ENTRIES,)))]
    assert len(left) == 4  # the loop and the kept iterations: nothing else
    # Version 4: each entry's record holds its metadata, none of its own.
    metadata = [k for k in driver.kv if k.startswith(keys.pack((keys.METADATA,)))]
    assert metadata == []


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


async def test_race_losers_whose_deletion_was_lost_are_deleted_again(clock, mode):
    driver = DropsDeletes("lost")
    calls = []

    async def slow(ctx):
        await ctx.step("slow-step", lambda: calls.append("slow") or "slow")
        await ctx.sleep("nap", 3600)
        return "slow"

    async def fast(ctx):
        return await ctx.step("fast-step", lambda: "fast")

    async def wf(ctx, _):
        winner = await ctx.race("r", {"slow": slow, "fast": fast})
        await ctx.sleep("later", 10)
        return winner

    driver.armed = True  # the first run's loser deletion is lost
    first = await execute(clock, "wf-1", wf, driver, "yield")
    assert first.state == "sleeping" and not driver.armed
    # The losing branch's entries (its step and its sleep) are still stored;
    # they are not history.
    stored = [k for k in driver.kv if k.startswith(keys.pack((keys.ENTRIES,)))]
    assert len(stored) == 5
    assert [h.location for h in await read_history(driver)] == [
        "r",
        "r/fast/fast-step",
        "later",
    ]
    clock.advance(10)
    driver.calls.clear()
    outcome = await run_to_end(clock, "wf-1", wf, driver, mode)
    assert outcome.output == ["fast", "fast"]
    assert "delete_prefix" in driver.calls  # the lost deletion ran again
    storage = await Storage.load(driver)
    assert sorted(storage.location_string(loc) for loc in storage.entries) == [
        "later",
        "r",
        "r/fast/fast-step",
    ]
    assert len(storage.metadata) == 3
    assert not storage.pending_prefixes and not storage.pending_keys


async def test_orphaned_metadata_is_deleted_on_the_next_flush(clock, driver):
    async def wf(ctx, _):
        await ctx.step("one", lambda: 1)
        await ctx.sleep("nap", 60)
        return await ctx.step("two", lambda: 2)

    await run_workflow("wf-1", wf, None, driver)
    # A version-3 metadata record whose entry is gone (its delete was lost).
    orphan = keys.metadata_key("gone")
    driver.kv[orphan] = schema.encode_metadata(schema.EntryMetadata(status="completed"))
    driver._sorted = sorted(driver.kv)
    clock.advance(60)
    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.state == "completed"
    assert orphan not in driver.kv


async def test_loading_is_one_ordered_range_read(clock):
    driver = RecordingDriver()
    lists = []
    original = driver.list

    async def counting(prefix):
        lists.append(prefix)
        return await original(prefix)

    driver.list = counting

    async def wf(ctx, _):
        return await ctx.step("one", lambda: 1)

    await run_workflow("wf-1", wf, None, driver)
    await run_workflow("wf-1", wf, None, driver)
    assert lists == [b"", b""]


async def test_observers_hear_of_a_flush_that_only_deleted(clock, driver):
    snapshots = []
    storage = Storage(driver)
    loop = storage.register_name("loop")
    for iteration in range(3):
        storage.create_entry((loop, (loop, iteration), loop), "step", {})
    await storage.flush()
    storage.on_flush = lambda: snapshots.append(len(storage.entries))
    storage.delete_iterations((loop,), loop, 0, 2)
    await storage.flush()  # nothing to write: a delete-only flush
    assert snapshots == [1]


async def test_an_atomic_driver_gets_one_call_per_flush_even_when_pruning(clock, mode):
    class Atomic(RecordingDriver):
        atomic_batch = True

        def __init__(self):
            super().__init__()
            self.units = []

        async def atomic_flush(self, writes, deletions):
            self.units.append((len(writes), deletions))
            await super().atomic_flush(writes, deletions)

    driver = Atomic()
    executed = []
    outcome = await execute(clock, "wf-1", counting_loop(executed), driver, mode)
    assert outcome.output == 6
    # Every flush, pruning ones included, was one atomic_flush call and
    # nothing else: no batch, no separate delete.
    assert set(driver.calls) == {"atomic_flush"}
    pruning = [d for _, d in driver.units if d.ranges]
    assert len(pruning) == 2  # at iterations 4 and 6 (history_size 2)
    # Version 4: no metadata records of their own to delete with them.
    assert not any(d.keys for d in pruning)
    assert len(driver.units) == len(driver.calls)


async def test_a_failed_atomic_flush_changes_nothing_and_is_redone(clock):
    class FailsOnce(InMemoryDriver):
        atomic_batch = True
        fail = True

        async def atomic_flush(self, writes, deletions):
            if self.fail and deletions:
                self.fail = False
                raise OSError("transaction aborted")
            await super().atomic_flush(writes, deletions)

    driver = FailsOnce()
    executed = []
    wf = counting_loop(executed)
    with pytest.raises(StorageError):
        await run_workflow("wf-1", wf, None, driver)
    outcome = await run_workflow("wf-1", wf, None, driver)
    assert outcome.output == 6
    assert [h.location for h in await read_history(driver)] == [
        "l",
        "l/~4/s",
        "l/~5/s",
        "l/~6/s",
    ]


async def test_a_lost_loser_deletion_inside_a_loop_is_redone_for_the_race(clock):
    driver = DropsDeletes("lost")

    async def slow(ctx):
        await ctx.step("slow-step", lambda: "slow")
        await ctx.sleep("nap", 3600)

    once = [True]

    async def body(ctx, state):
        if state == 1 and once:
            driver.armed = bool(once.pop())  # lose iteration 1's loser deletion
        await ctx.race("r", {"slow": slow, "fast": lambda c: c.step("f", lambda: 1)})
        return Loop.break_(state) if state == 2 else Loop.continue_(state + 1)

    async def wf(ctx, _):
        await ctx.loop("l", body, state=0, history_prune_interval=100)
        await ctx.sleep("after", 10)
        return "done"

    first = await run_workflow("wf-1", wf, None, driver)
    assert first.state == "sleeping"

    def stored_entries():
        prefix = keys.pack((keys.ENTRIES,))
        return len([k for k in driver.kv if k.startswith(prefix)])

    assert stored_entries() == 3 * 2 + 1 + 2 + 1  # the lost loser is still there
    clock.advance(10)
    driver.calls.clear()
    assert (await run_workflow("wf-1", wf, None, driver)).output == "done"
    assert driver.calls.count("delete_prefix") == 1  # the race's, not a range
    assert "delete_range" not in driver.calls
    assert stored_entries() == 3 * 2 + 1 + 1
