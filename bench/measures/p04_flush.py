"""P4: ``Storage.flush()`` of N history entries via ``DjangoDriver``.

Subject: a ``Storage`` holding N new step entries (each a name row and one
entry record holding its metadata: two KV rows, since storage format
version 4; a flush of one batch would bring the names in its first entry's
record instead) flushed through a ``DjangoDriver`` holding the
workflow's lease, as a worker's run would: chunks of at most 128 writes,
each its own transaction, fenced by the lease (renewed at most every third
of the lease time, checked in each chunk's insert statement in between).

Baseline: the same rows (the exact key and value bytes the flush wrote,
recorded once from an in-memory flush) inserted raw, in the same 128-row
chunks, each one transaction with one multi-row ``INSERT`` into the same
table. The strongest way to put those rows there without the engine.
Every trial writes a new workflow's rows, deleted afterwards (untimed); on
SQLite the WAL is then checkpointed (untimed), so no trial pays for
checkpointing the pages an earlier one wrote or deleted.

Trials (issue 46): at 10,000 entries both databases run 25 paired trials.
With 5, the median of five per-trial ratios swung 1.00-1.51x from run to
run on SQLite (a 0.3 s trial on a shared disk: one slow fsync moves a ratio
by a third); PostgreSQL's 11 still swung 0.89-1.25x.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from bench.core import Target, alternate, row_from

ID = "P4"
TITLE = "storage.flush() vs raw 128-row bulk inserts"
TARGET = Target("ratio", "<=", 1.2)
CHUNK = 128


def build(driver: Any, size: int) -> Any:
    """Return a ``Storage`` holding ``size`` completed steps ``s0``, ``s1``...

    Each entry, name and metadata is what the engine records for a trivial
    step that succeeded at its first attempt (P6 replays them as such); built
    directly because the engine's own per-step flush is slower than linear
    in the history length (see bench/README.md).
    """
    from django_rivet import clock
    from django_rivet.engine.storage import Storage

    storage = Storage(driver)
    for index in range(size):
        name = storage.register_name(f"s{index}")
        entry = storage.create_entry(
            (name,), "step", {"output": index}, status="completed"
        )
        metadata = storage.meta(entry)
        metadata.attempts = 1
        metadata.last_attempt_at = metadata.completed_at = clock.now()
    return storage


def run_private(coroutine: Any) -> Any:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


def leg(size: int, trials: int) -> dict[str, Any]:
    from django.db import connection, transaction

    from bench import internals
    from django_rivet import workflows
    from django_rivet.engine import InMemoryDriver
    from django_rivet.workflows.driver import DjangoDriver

    class Recorder(InMemoryDriver):
        def __init__(self) -> None:
            super().__init__()
            self.written: list[tuple[bytes, bytes]] = []

        async def batch(self, writes: list[tuple[bytes, bytes]]) -> None:
            self.written += writes
            await super().batch(writes)

    recorder = Recorder()
    run_private(build(recorder, size).flush())
    rows = recorder.written
    table, fk, key, value = internals.workflow_kv_table()

    def subject() -> float:
        workflow_id = workflows.start("benchSteps", 0).workflow_id
        token = internals.take_lease(workflow_id)
        driver = DjangoDriver(workflow_id, lease_token=token, private_loop=True)
        storage = build(driver, size)
        started = time.perf_counter()
        run_private(storage.flush())
        elapsed = time.perf_counter() - started
        internals.delete_workflow_kv(workflow_id)
        internals.checkpoint_sqlite()
        return elapsed

    def baseline() -> float:
        workflow_id = workflows.start("benchSteps", 0).workflow_id
        started = time.perf_counter()
        for start in range(0, len(rows), CHUNK):
            chunk = rows[start : start + CHUNK]
            sql = f"INSERT INTO {table} ({fk}, {key}, {value}) VALUES " + ", ".join(
                ["(%s, %s, %s)"] * len(chunk)
            )
            params: list[Any] = []
            for k, v in chunk:
                params += (workflow_id, k, v)
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(sql, params)
        elapsed = time.perf_counter() - started
        internals.delete_workflow_kv(workflow_id)
        internals.checkpoint_sqlite()
        return elapsed

    result = alternate(subject, baseline, trials, warmup=1)
    result["kv_rows"] = len(rows)
    return result


def quartiles(found: dict[str, Any]) -> list[float]:
    """Return the quartiles of the per-trial ratios (how far one trial moves)."""
    pairs = zip(found["subject_samples"], found["baseline_samples"], strict=True)
    ratios = [s / b for s, b in pairs]
    return statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios


def run(ctx: Any) -> list:
    sizes = ctx.size(
        {  # size: trials, per database
            "sqlite": {1_000: 15, 10_000: 25, 100_000: 2},
            "postgresql": {1_000: 7, 10_000: 25, 100_000: 2},
        },
        {"sqlite": {100: 1}, "postgresql": {100: 1}},  # quick: one trial
    )
    main = ctx.size(10_000, 100)
    out = []
    for db, label in (("sqlite", "SQLite-WAL"), ("postgresql", "PostgreSQL")):
        for size, trials in sizes[db].items():
            found = ctx.leg(
                "bench.measures.p04_flush:leg", {"size": size, "trials": trials}, db=db
            )
            ctx.curve(
                f"P4 flush, {label}",
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
                        f"flush {size:,} entries ({found['kv_rows']:,} rows), {label}"
                        f" ({trials} trials)",
                        "s",
                        found,
                        "raw inserts",
                        TARGET,
                        ratio_quartiles=quartiles(found),
                    )
                )
    return out
