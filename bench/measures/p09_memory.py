"""P9: memory per idle cached actor, and per open connection.

Actors: one process (SQLite-WAL) creates N actors and calls each once, so
each is loaded into the process's cache, with ``SLEEP_TIMEOUT`` raised so
none is evicted while the others load; resident memory (``VmRSS``) after a
``gc.collect()``, minus the same before, divided by N. The cache holding
all N is checked.

Connections: daphne's resident memory per open django-rivet connection,
next to a raw Channels consumer's, from the broadcast leg (broadcast.py).

No baseline and no target: these set the budget (see bench/README.md).
"""

from __future__ import annotations

import gc
from typing import Any

from bench.core import Row, summarize
from bench.measures import broadcast

ID = "P9"
TITLE = "memory per idle cached actor and per open connection"


def leg(count: int) -> dict[str, Any]:
    from bench import internals
    from bench.measures.broadcast import rss_kib
    from django_rivet import actors

    # Warm up imports, connections and code paths before the first reading.
    for index in range(20):
        actors.get_or_create("idle", f"warm{index}").call("touch")
    gc.collect()
    before = rss_kib(_pid())
    cached_before = internals.actor_cache_size()
    for index in range(count):
        actors.get_or_create("idle", f"a{index}").call("touch")
    gc.collect()
    after = rss_kib(_pid())
    cached = internals.actor_cache_size() - cached_before
    assert cached == count, f"{cached} of {count} actors cached"
    return {"kib_per_actor": (after - before) / count, "rss_kib": after}


def _pid() -> int:
    import os

    return os.getpid()


def run(ctx: Any) -> list:
    count = ctx.size(10_000, 200)
    found = ctx.leg(
        "bench.measures.p09_memory:leg",
        {"count": count},
        db="sqlite",
        # Room for every actor: at the default bound (10,000) the 20 warm-up
        # actors put the cache over it, and the background watcher evicted
        # some of them while the count was taken (9,995 of 10,000).
        env={
            "RIVET_BENCH_SLEEP_TIMEOUT": "86400",
            "RIVET_BENCH_ACTOR_CACHE_SIZE": str(2 * count),
        },
    )
    conns = broadcast.results(ctx)
    memory, n = conns["memory_kib"], conns["connections"]
    rivet = (memory["rivet"] - memory["start"]) / n
    raw = (memory["raw"] - memory["rivet"]) / n
    return [
        Row(ID, f"idle cached actor ({count:,} in one process)", "KiB",
            summarize([found["kib_per_actor"]])),
        Row(ID, f"open connection in daphne ({n:,} open)", "KiB",
            summarize([rivet]), summarize([raw]), "raw consumer",
            rivet / raw if raw > 0 else None),
    ]  # fmt: skip
