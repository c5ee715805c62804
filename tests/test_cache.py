"""The process cache gives its memory back: idle eviction and compaction."""

import asyncio
import sys

import pytest
from django.test import override_settings

from django_rivet import actors
from django_rivet.actors import cache, spine
from django_rivet.actors.operations import CallAction
from django_rivet.actors.rows import ActorRef
from django_rivet.actors.spine import ainvoke

pytestmark = pytest.mark.django_db(transaction=True)


async def increment(key):
    return await ainvoke(
        ActorRef.of("counter", key, mode="get_or_create"), CallAction("increment", [1])
    )


async def test_an_idle_process_evicts_its_actors_without_another_call():
    with override_settings(RIVET={"SLEEP_TIMEOUT": 0.2}):
        await increment(["idle"])
        assert cache.cached_ids()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while cache.cached_ids():
            assert loop.time() < deadline, "the idle actor was never evicted"
            await asyncio.sleep(0.05)


def test_evicting_many_actors_shrinks_the_cache(monkeypatch):
    monkeypatch.setattr(cache, "COMPACT_AFTER", 50)
    for index in range(400):
        actors.get_or_create("counter", f"many-{index}")
    full = sys.getsizeof(cache._cache)
    assert spine.evict_idle(0) == 400
    assert sys.getsizeof(cache._cache) < full / 4
