"""P14: starting a workflow through a workflow queue vs starting it directly.

Subject: ``workflows.start("benchSteps", 1, queue="bench")`` on a queue with
a concurrency limit (``{"concurrency": 1_000_000}``, so every start is
admitted at once): the insert, then the admission pass that runs when it
commits (lock the queue row, count its running workflows, pick, mark it
pending, dispatch). Baseline: ``workflows.start("benchSteps", 1)`` on the
same database. Two rows per database: the start alone (per start, 100 per
trial), and start plus the run to completion (``run_until_idle``, what a
worker does), where the queue's cost is a share of the whole. Between trials
the started workflows are marked finished (untimed), so the running count
admission reads stays what a steady queue sees.

The partitioned start (issue 44): the same start on a partitioned queue
(``partition_concurrency`` too, as high), each start naming one of 20
partition keys in turn: its admission pass counts per partition and serves
the partitions in turn.
"""

from __future__ import annotations

import time
from typing import Any

from bench.core import Target, alternate, row_from

ID = "P14"
TITLE = "queued workflow start vs direct start"
TARGET = Target("none")
QUEUE = "bench"
PARTITIONED = "benchPartitioned"
KEYS = 20


def leg(
    batch: int, trials: int, run: bool, partitioned: bool = False
) -> dict[str, Any]:
    from django_rivet import clock, workflows
    from django_rivet.models import WORKFLOW_ADMITTED, Workflow
    from django_rivet.testing import run_until_idle

    def trial(queue: str | None) -> float:
        started = time.perf_counter()
        for index in range(batch):
            key = f"tenant-{index % KEYS}" if queue == PARTITIONED else None
            handle = workflows.start("benchSteps", 1, queue=queue, partition_key=key)
            if run:
                assert run_until_idle(handle) == "completed"
        elapsed = time.perf_counter() - started
        Workflow.objects.filter(status__in=WORKFLOW_ADMITTED).update(
            status="completed", wake_at=None, finished_at=clock.now_datetime()
        )
        return elapsed / batch * 1e6

    queue = PARTITIONED if partitioned else QUEUE
    return alternate(lambda: trial(queue), lambda: trial(None), trials, warmup=1)


def run(ctx: Any) -> list:
    batch, trials = ctx.size((100, 9), (5, 1))
    out = []
    for db, label in (("sqlite", "SQLite-WAL"), ("postgresql", "PostgreSQL")):
        for with_run, what in ((False, "start"), (True, "start + run, 1 step")):
            found = ctx.leg(
                "bench.measures.p14_queue:leg",
                {"batch": batch, "trials": trials, "run": with_run},
                db=db,
            )
            out.append(
                row_from(ID, f"queued {what}, {label}", "us", found, "direct", TARGET)
            )
        found = ctx.leg(
            "bench.measures.p14_queue:leg",
            {"batch": batch, "trials": trials, "run": False, "partitioned": True},
            db=db,
        )
        out.append(
            row_from(ID, f"partitioned start, {label}", "us", found, "direct", TARGET)
        )
    return out
