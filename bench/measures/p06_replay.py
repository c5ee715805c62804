"""P6: load + replay of a workflow with N history entries (the cold wake).

Issue 46 split the wake in two: this measure is the cold one, a run that
loads and replays the whole history; P6w (p06_wake.py) times many wakes of
one workflow, which a per-process history cache or a live window may serve
without the load. On a build with such a cache, this measure must keep it
off (or cold) to stay what it was.

Subject: a ``benchReplay`` workflow whose history holds N completed steps
waits for a message; each trial sends it one (untimed) and times
``run_until_idle``: claim, load the whole history, replay the N steps (and
the messages received so far), record the new message, wait again, release.
The history is prepared in linear time: the N step entries are built with
``Storage`` (as P4 does: what the engine records for a trivial step), flushed
into an ``InMemoryDriver`` and copied into the database; a first run then
records the message wait on top, as a real run would.

Baseline: a raw ``SELECT key, value ... ORDER BY key`` of the same rows,
fetched whole -- the least a load has to read.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.core import Target, alternate, row_from

ID = "P6"
TITLE = "load + replay of a long history vs raw SELECT"
TARGET = Target("ratio", "<=", 2.0)


def with_history(name: str, size: int) -> tuple[Any, int]:
    """Start workflow ``name`` with ``size`` completed steps; run it to its wait.

    Returns its handle and how many KV rows the prepared steps took.
    """
    from bench import internals
    from bench.measures.p04_flush import build
    from django_rivet import workflows
    from django_rivet.engine import InMemoryDriver
    from django_rivet.testing import run_until_idle

    handle = workflows.start(name, size)
    driver = InMemoryDriver()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(build(driver, size).flush())
    finally:
        loop.close()
    internals.add_kv_rows(handle.workflow_id, driver.kv)
    assert run_until_idle(handle) == "sleeping"  # replays, then waits for m0
    return handle, len(driver.kv)


def leg(size: int, trials: int) -> dict[str, Any]:
    from django.db import connection

    from bench import internals
    from django_rivet.testing import run_until_idle

    handle, kv_rows = with_history("benchReplay", size)
    table, fk, key, value = internals.workflow_kv_table()
    select = f"SELECT {key}, {value} FROM {table} WHERE {fk} = %s ORDER BY {key}"
    sent = iter(range(10**9))

    def subject() -> float:
        handle.send(f"m{next(sent)}", None)
        started = time.perf_counter()
        status = run_until_idle(handle)
        elapsed = time.perf_counter() - started
        assert status == "sleeping", status
        return elapsed

    def baseline() -> float:
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(select, [handle.workflow_id])
            rows = cursor.fetchall()
        elapsed = time.perf_counter() - started
        assert len(rows) >= kv_rows
        return elapsed

    result = alternate(subject, baseline, trials, warmup=1)
    result["kv_rows"] = kv_rows
    return result


def run(ctx: Any) -> list:
    sizes = ctx.size({1_000: 7, 10_000: 5, 100_000: 2}, {100: 1})
    main = ctx.size(10_000, 100)
    out = []
    for db, label in (("sqlite", "SQLite-WAL"), ("postgresql", "PostgreSQL")):
        for size, trials in sizes.items():
            found = ctx.leg(
                "bench.measures.p06_replay:leg", {"size": size, "trials": trials}, db=db
            )
            ctx.curve(
                f"P6 load+replay, {label}",
                {
                    "size": size,
                    "value": found["subject"]["median"],
                    "baseline": found["baseline"]["median"],
                    "unit": "entries",
                },
            )
            if size == main:
                out.append(
                    row_from(
                        ID,
                        f"load+replay {size:,} entries, {label}",
                        "s",
                        found,
                        "raw SELECT",
                        TARGET,
                    )
                )
    return out
