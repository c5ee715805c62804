"""P16: Django's Tasks API on django-rivet vs django-tasks-db, 1,000 no-ops.

Subject: ``noop.enqueue()`` on ``RivetTaskBackend`` (each task a
``rivet.task`` workflow), then django-rivet's in-process worker round
(``Worker.run_once``, what ``rivet_worker`` and the embedded worker loop
on) until every task finished. Baseline: the same task on
``django_tasks_db.DatabaseBackend`` (``.using(backend="db")``), then its
own worker (``db_worker``'s ``Worker`` in batch mode, no interval), in the
same process, on the same database. Two rows per database: enqueue latency
(per enqueue) and the time to drain the batch. Trials alternate; between
them every task row is deleted (untimed), so both start from empty tables.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.core import Target, row_from, summarize

ID = "P16"
TITLE = "Django tasks: enqueue + drain vs django-tasks-db"
DRAIN = Target("ratio", "<=", 1.0)
ENQUEUE = Target("ratio", "<=", 1.2)


def leg(count: int, trials: int) -> dict[str, Any]:
    from django_tasks_db.management.commands.db_worker import Worker as DBWorker
    from django_tasks_db.models import DBTaskResult

    from bench.benchapp.tasks_api import noop
    from django_rivet.models import Workflow
    from django_rivet.upkeep.worker import Worker

    on_db = noop.using(backend="db")

    def rivet() -> tuple[float, float]:
        started = time.perf_counter()
        for _ in range(count):
            noop.enqueue()
        enqueued = time.perf_counter()
        worker = Worker(poll_interval=0.0, sweep_interval=3600.0)
        while worker.run_once():
            pass
        drained = time.perf_counter()
        done = Workflow.objects.filter(name="rivet.task", status="completed")
        assert done.count() == count, "rivet left tasks behind"
        Workflow.objects.all().delete()
        return (enqueued - started) / count * 1e6, drained - enqueued

    def baseline() -> tuple[float, float]:
        started = time.perf_counter()
        for _ in range(count):
            on_db.enqueue()
        enqueued = time.perf_counter()
        DBWorker(
            queue_names=["default"],
            interval=0,
            batch=True,
            backend_name="db",
            startup_delay=False,
            max_tasks=None,
            worker_id="bench",
            excluded_queue_names=[],
        ).run()
        drained = time.perf_counter()
        assert DBTaskResult.objects.filter(status="SUCCESSFUL").count() == count
        DBTaskResult.objects.all().delete()
        return (enqueued - started) / count * 1e6, drained - enqueued

    rivet(), baseline()  # warm-up, dropped
    ours: list[tuple[float, float]] = []
    theirs: list[tuple[float, float]] = []
    for index in range(trials):
        order = (baseline, rivet) if index % 2 == 0 else (rivet, baseline)
        for fn in order:
            (ours if fn is rivet else theirs).append(fn())
    out = {}
    for position, name in ((0, "enqueue"), (1, "drain")):
        subjects = [sample[position] for sample in ours]
        baselines = [sample[position] for sample in theirs]
        ratios = [s / b for s, b in zip(subjects, baselines, strict=True) if b]
        out[name] = {
            "subject": summarize(subjects),
            "baseline": summarize(baselines),
            "ratio": statistics.median(ratios) if ratios else None,
            "subject_samples": subjects,
            "baseline_samples": baselines,
        }
    return out


def run(ctx: Any) -> list:
    count, trials = ctx.size((1000, 5), (20, 1))
    out = []
    for db, label in (("sqlite", "SQLite-WAL"), ("postgresql", "PostgreSQL")):
        found = ctx.leg(
            "bench.measures.p16_tasks:leg", {"count": count, "trials": trials}, db=db
        )
        out.append(
            row_from(
                ID, f"enqueue, {label}", "us", found["enqueue"], "django-tasks-db",
                ENQUEUE,
            )
        )  # fmt: skip
        out.append(
            row_from(
                ID, f"drain {count:,} no-op tasks, {label}", "s", found["drain"],
                "django-tasks-db", DRAIN,
            )
        )  # fmt: skip
    return out
