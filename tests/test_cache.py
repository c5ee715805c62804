"""The process cache gives its memory back: idle eviction and compaction."""

import sys

import pytest
from django.test import override_settings

from django_rivet import actors
from django_rivet.actors import cache, spine
from django_rivet.actors.operations import CallAction
from django_rivet.actors.rows import ActorRef
from django_rivet.actors.spine import ainvoke
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
