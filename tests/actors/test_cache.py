"""The process cache gives its memory back: idle eviction and compaction."""

import gc
import heapq
import sys
import tracemalloc

import pytest
from django.test import override_settings

from django_rivet import Actor, InvalidValue, action, actors, encoding
from django_rivet.actors import cache, sizes, spine
from django_rivet.actors.lanes import ainvoke
from django_rivet.actors.operations import CallAction
from django_rivet.actors.rows import ActorRef
from django_rivet.models import Actor as ActorRow
from django_rivet.testing import register_temporarily
from tests.support.polling import await_for, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


async def increment(key):
    return await ainvoke(
        ActorRef.of("counter", key, mode="get_or_create"), CallAction("increment", [1])
    )


async def test_an_idle_process_evicts_its_actors_without_another_call():
    with override_settings(RIVET={"SLEEP_TIMEOUT": 0.2}):
        await increment(["idle"])
        assert cache.cached_ids()
        await await_for(
            lambda: not cache.cached_ids(), what="the idle actor's eviction"
        )


def test_evicting_many_actors_shrinks_the_cache(monkeypatch):
    monkeypatch.setattr(cache, "COMPACT_AFTER", 50)
    for index in range(400):
        actors.get_or_create("counter", f"many-{index}")
    full = sys.getsizeof(cache._cache)
    assert spine.evict_idle(0) == 400
    # The idle-eviction thread compacts within a second or so.
    wait_for(lambda: sys.getsizeof(cache._cache) < full / 4, what="the cache shrinking")


def test_the_cache_is_bounded_by_size():
    with override_settings(RIVET={"ACTOR_CACHE_SIZE": 5}):
        handles = [actors.get_or_create("counter", f"b-{i}") for i in range(20)]
        for handle in handles:
            handle.call("increment")
        wait_for(lambda: len(cache.cached_ids()) <= 5, what="the cache's bound")
        # The most recently used stayed.
        assert handles[-1].actor_id in cache.cached_ids()


MIB = 1024 * 1024


def test_the_cache_is_bounded_by_the_bytes_of_its_decoded_states():
    # Six actors of ~0.9 MB encoded state each hold ~70 MiB of Python
    # objects once decoded; the byte bound keeps what the cache holds near it.
    limit = 8 * MIB
    with override_settings(RIVET={"ACTOR_CACHE_BYTES": limit}):
        handles = [actors.get_or_create("hoard", f"bytes-{n}") for n in range(6)]
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for handle in handles:
                handle.call("records", 19_000)
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert held < limit + 8 * MIB, f"{held / MIB:.1f} MiB held"
        # Every actor still answers: a dropped state is read again.
        assert [h.call("count_records") for h in handles] == [19_000] * 6


# -- the estimate follows the state's shape (audit 2026-12) ---------------------------
class Holder(Actor):
    """Holds a state of a shape named by the caller, built here."""

    name = "holder"
    initial_state = {}

    @action
    def fill(self, ctx, shape: str, n: int):
        ctx.state = SHAPES[shape](n)

    @action
    def peek(self, ctx):
        return len(ctx.state)

    @action
    def touch(self, ctx, index: int):
        ctx.state[index] = {"": {}} if ctx.state[index] != {"": {}} else {"": 1}

    @action
    def push(self, ctx, value: int):
        heapq.heappush(ctx.state, value)  # C: writes the list directly

    @action
    def smuggle(self, ctx):
        ctx.state[0] = {1, 2}  # a set, in place: not in the value domain


SHAPES = {
    # What a client can make an action store, at ~1-4 MiB decoded each.
    "records": lambda n: [{"id": i, "name": f"n{i}", "ok": True} for i in range(n)],
    "one-entry maps": lambda n: [{"": {}} for _ in range(n)],
    "nested one-entry maps": lambda n: [{"a": {"b": {"c": i}}} for i in range(n)],
    "astral strings": lambda n: ["\U0001f600" + "x" * 200 for _ in range(n // 10)],
    "astral keys": lambda n: {"\U0001f600" + f"{i:060}": i for i in range(n // 4)},
    "small integers": lambda n: [[1, 2, 3] for _ in range(2 * n)],
    "two-character strings": lambda n: ["ab"] * (3 * n),
    "floats and big integers": lambda n: [[i + 0.5, 2**40 + i] for i in range(n)],
}
MEASURED = sorted(SHAPES)
SHAPES["text"] = lambda n: ["x" * (30 * n)]


@pytest.mark.parametrize("shape", MEASURED)
def test_the_cache_estimate_holds_within_half_again_of_measured_memory(shape):
    with register_temporarily(Holder):
        holder = actors.get_or_create("holder", shape)
        holder.call("fill", shape, 10_000)
        cache.clear()  # the next call decodes the row and keeps the result
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            holder.call("peek")
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        estimated = cache.cached_bytes()
    assert held > MIB  # large enough that the call's own allocations do not count
    assert 1 / 1.5 <= estimated / held <= 1.5, f"{estimated / held:.2f}x"


def test_a_call_that_changes_nothing_neither_walks_nor_measures_the_state(
    monkeypatch,
):
    walks, measures = [], []
    monkeypatch.setattr(encoding, "check_value", counting(encoding.check_value, walks))
    monkeypatch.setattr(sizes, "measure", counting(sizes.measure, measures))
    with register_temporarily(Holder):
        holder = actors.get_or_create("holder", "reads")
        holder.call("fill", "records", 1000)
        assert walks and measures  # a new state is checked and measured
        walks.clear(), measures.clear()
        for _ in range(3):
            assert holder.call("peek") == 1000
        # Detected by its encoding (cbor2, in C): equal to the stored bytes.
        assert (walks, measures) == ([], [])


def test_what_a_call_changes_in_place_is_still_found_and_checked():
    with register_temporarily(Holder):
        holder = actors.get_or_create("holder", "heap")
        holder.call("fill", "small integers", 0)
        for value in (5, 1, 3):
            holder.call("push", value)  # heapq writes the list from C
        cache.clear()
        assert ActorRow.objects.get(pk=holder.actor_id).decoded_state() == [1, 5, 3]
        with pytest.raises(InvalidValue):
            holder.call("smuggle")  # changed in place, outside the domain
        assert ActorRow.objects.get(pk=holder.actor_id).decoded_state() == [1, 5, 3]


def counting(function, calls):
    def counted(*args, **kwargs):
        calls.append(args)
        return function(*args, **kwargs)

    return counted


def decoded_size(holder):
    """What the actor's stored state costs decoded, by tracemalloc."""
    data = bytes(ActorRow.objects.get(pk=holder.actor_id).state)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        state = encoding.cbor_loads(data)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    del state
    return held + sys.getsizeof(data) + cache.INSTANCE_BYTES


def test_a_state_that_changes_shape_in_place_is_measured_again(monkeypatch):
    measures = []
    monkeypatch.setattr(sizes, "measure", counting(sizes.measure, measures))
    with register_temporarily(Holder):
        cache.clear()
        holder = actors.get_or_create("holder", "reshaped")
        holder.call("fill", "text", 10_000)  # 300 KB of one string
        holder.call("peek")
        measures.clear()
        # The same encoded size or so, 70 times the memory: measured again.
        holder.call("fill", "one-entry maps", 100_000)
        assert len(measures) == 1
        estimated = cache.cached_bytes()
        assert 1 / 1.5 <= estimated / decoded_size(holder) <= 1.5
        # Writes of a few bytes each keep the measure: what they could move
        # (128 bytes of memory per encoded byte, at most) stays far below a
        # quarter of it.
        for index in range(40):
            holder.call("touch", index)
        assert len(measures) == 1
        estimated = cache.cached_bytes()
        assert 1 / 1.5 <= estimated / decoded_size(holder) <= 1.5


def test_changes_add_up_until_the_state_is_measured_again():
    data = bytes(1000)
    measure = cache.Measure(size=4000, drift=0, data=data)
    one_byte = data[:500] + b"\x01" + data[501:]
    # Two bytes differ (one each side): 256 of the 1,000 allowed.
    assert cache.remeasure(None, one_byte, measure) == (4000, 256)
    far = cache.Measure(size=4000, drift=900, data=data)
    assert cache.remeasure([0] * 10, one_byte, far)[1] == 0  # measured
    assert cache.remeasure(None, data, far) == (4000, 900)  # the same bytes
