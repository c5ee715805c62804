"""How fast retention deletes rows, the way the sweeper and rivet_purge do it.

Each leg (a process of its own, PostgreSQL with default durability and
SQLite in WAL mode) fills the tables with rows past their retention:
``WORKFLOWS`` finished workflows of ``KV_PER_WORKFLOW`` history rows each
(one in ten with an inbox message), as many fired schedules and processed
queue messages, and as many *active* workflows that must stay (so the purge
has to find its rows through the partial indexes rather than by luck). Then:

- ``sweep``: ``purge_pass`` one batch per table per call, as each sweep
  does, until nothing is left; the time of each call is how long one batch
  holds its locks;
- ``purge_all`` (``rivet_purge``) on a second, identical fill;
- ``big-history``: workflows of 200 history rows each, a batch of 500 of
  them per transaction.

Rows/s counts every row deleted (workflows, their KV and messages,
schedules, queue messages). Run with ``scripts/bench.sh retention``; writes
``bench/results/retention.json``. It is a measurement, not a test.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import database_legs, run_leg, setup_django, write_results  # noqa: E402

WORKFLOWS = 20_000
KV_PER_WORKFLOW = 10
VALUE = b"\xa1" + b"x" * 120  # a ~120-byte history record
OLD = datetime(2020, 1, 1, tzinfo=UTC)


def fill(prefix: str, workflows: int, kv_per_workflow: int, others: int) -> int:
    """Insert rows past their retention (plus live workflows); return the count."""
    from django_rivet.models import (
        Actor,
        QueueMessage,
        Schedule,
        Workflow,
        WorkflowKV,
        WorkflowMessage,
    )

    chunk = 2000
    total = 0
    for start in range(0, workflows, chunk):
        ids = [f"{prefix}-{n}" for n in range(start, min(start + chunk, workflows))]
        Workflow.objects.bulk_create(
            Workflow(
                id=i, name="bench", status="completed", finished_at=OLD, wake_at=None
            )
            for i in ids
        )
        Workflow.objects.bulk_create(
            Workflow(id=f"live-{i}", name="bench", status="sleeping", wake_at=OLD)
            for i in ids
        )
        WorkflowKV.objects.bulk_create(
            WorkflowKV(workflow_id=i, key=k.to_bytes(2, "big"), value=VALUE)
            for i in ids
            for k in range(kv_per_workflow)
        )
        WorkflowMessage.objects.bulk_create(
            WorkflowMessage(workflow_id=i, name="late", body=b"\xf6") for i in ids[::10]
        )
        total += len(ids) * (1 + kv_per_workflow) + len(ids[::10])
    if others:
        actor = Actor.objects.create(name="bench", key=f'["{prefix}"]')
        for start in range(0, others, chunk):
            count = min(chunk, others - start)
            Schedule.objects.bulk_create(
                Schedule(
                    id=uuid.uuid4(),
                    actor=actor,
                    action="ring",
                    run_at=OLD,
                    status="done",
                    finished_at=OLD,
                )
                for _ in range(count)
            )
            QueueMessage.objects.bulk_create(
                QueueMessage(
                    actor=actor,
                    queue="jobs",
                    body=b"\xf6",
                    status="done",
                    finished_at=OLD,
                )
                for _ in range(count)
            )
            total += 2 * count
    return total


def run_sweeps(batch: int) -> tuple[int, float, list[float]]:
    from django_rivet.upkeep.retention import purge_pass

    deleted, calls = 0, []
    started = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        counts = purge_pass(batch)
        calls.append(time.perf_counter() - t0)
        if not counts:
            break
        deleted += sum(counts.values())
    return deleted, time.perf_counter() - started, calls


def rate(deleted: int, seconds: float) -> dict[str, float]:
    return {"rows": deleted, "seconds": seconds, "rows_per_s": deleted / seconds}


def explain() -> str:
    from django.db import connection

    from django_rivet.upkeep.retention import _workflows

    query = _workflows().order_by("finished_at").values_list("pk")[:500]
    if connection.vendor != "postgresql":
        return ""
    return query.explain()


def leg(label: str) -> dict:
    setup_django()
    from django.db import connection

    from django_rivet.models import Workflow, WorkflowKV
    from django_rivet.upkeep.retention import PURGE_BATCH, purge_all

    result: dict = {}
    filled = fill("sweep", WORKFLOWS, KV_PER_WORKFLOW, WORKFLOWS)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    result["explain"] = explain()
    deleted, seconds, calls = run_sweeps(PURGE_BATCH)
    assert deleted == filled, (deleted, filled)
    full = sorted(calls[:-1])
    result["sweep"] = {
        **rate(deleted, seconds),
        "passes": len(calls),
        "pass_median_ms": statistics.median(full) * 1000,
        "pass_max_ms": full[-1] * 1000,
    }
    filled = fill("all", WORKFLOWS, KV_PER_WORKFLOW, WORKFLOWS)
    started = time.perf_counter()
    counts = purge_all()
    result["purge_all"] = rate(sum(counts.values()), time.perf_counter() - started)
    assert sum(counts.values()) == filled
    filled = fill("big", 2000, 200, 0)
    deleted, seconds, calls = run_sweeps(PURGE_BATCH)
    full = sorted(calls[:-1])
    result["big-history"] = {
        **rate(deleted, seconds),
        "pass_median_ms": statistics.median(full) * 1000,
        "pass_max_ms": full[-1] * 1000,
    }
    assert not WorkflowKV.objects.filter(workflow__status="completed").exists()
    result["live_workflows_kept"] = Workflow.objects.filter(status="sleeping").count()
    return result


def main() -> None:
    report: dict = {}
    for label, env in database_legs():
        report[label] = run_leg(__file__, label, env)
    shape = (
        f"{WORKFLOWS} finished workflows x {KV_PER_WORKFLOW} KV rows (+1 message "
        f"per 10), {WORKFLOWS} schedules, {WORKFLOWS} queue messages"
    )
    print(shape)
    print(
        f"{'database':<12} {'run':<12} {'rows':>8} {'s':>7} {'rows/s':>8} "
        f"{'batch ms':>16}"
    )
    for label, found in report.items():
        for run in ("sweep", "purge_all", "big-history"):
            r = found[run]
            batch = ""
            if "pass_median_ms" in r:
                batch = f"{r['pass_median_ms']:.0f} (max {r['pass_max_ms']:.0f})"
            print(
                f"{label:<12} {run:<12} {r['rows']:>8} {r['seconds']:>7.2f} "
                f"{r['rows_per_s']:>8.0f} {batch:>16}"
            )
        if found.get("explain"):
            print(f"{label} plan of the batch query:\n{found['explain']}")
    report["_meta"] = {"shape": shape, "batch": 500}
    print("written", write_results("retention", report))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--leg":
        print(json.dumps(leg(sys.argv[2])))
    else:
        main()
