"""The process cache gives its memory back: idle eviction and compaction."""

import gc
import sys
import tracemalloc

import pytest
from django.test import override_settings

from django_rivet import actors
from django_rivet.actors import cache, spine
from django_rivet.actors.lanes import ainvoke
from django_rivet.actors.operations import CallAction
from django_rivet.actors.rows import ActorRef
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
