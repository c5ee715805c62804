"""P8: lateness of N schedules due over S seconds, per way of firing them.

Legs, on PostgreSQL (default durability):

* ``Celery+Redis``: a Celery worker with beat (prefork, 2 processes) on
  Redis, as in production; each schedule's ETA task is sent when the
  action that created it commits;
* ``embedded worker``: the embedded worker thread of the process creating
  the schedules (what ``make run`` runs inside daphne).

Twenty actors each plan N/20 schedules (``ctx.schedule.at``) spread evenly
over S seconds starting a few seconds ahead; the scheduled action records
``time.time() - ctx.fire_info["scheduled_at"]``: how late it ran. For
reference (not a target), the same run measures bare Celery ETA tasks on
the same worker, and a thread sleeping until each due time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

from bench.core import Row, Target, percentile, summarize

ID = "P8"
TITLE = "schedule lateness: Celery+Redis and the embedded worker"
TARGET = Target("value", "<=", 50, "p99 <= 50 ms")
ACTORS = 20


def due_times(count: int, spread: float, lead: float) -> list[float]:
    start = time.time() + lead
    return [start + spread * i / count for i in range(count)]


def stats(lateness_s: list[float]) -> dict[str, float]:
    values = [x * 1000 for x in lateness_s]
    return {
        "n": len(values),
        "p50_ms": percentile(values, 0.5),
        "p99_ms": percentile(values, 0.99),
        "max_ms": max(values),
    }


def redis_list(key: str, count: int, timeout: float, worker: Any = None) -> list[float]:
    import redis

    client = redis.Redis.from_url(os.environ["RIVET_BENCH_REDIS_URL"])
    deadline = time.monotonic() + timeout
    while client.llen(key) < count:
        if worker is not None and worker.poll() is not None:
            raise RuntimeError(f"the Celery worker exited ({worker.returncode})")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{key}: {client.llen(key)} of {count}")
        time.sleep(0.1)
    return [float(x) for x in client.lrange(key, 0, -1)]


@contextlib.contextmanager
def celery_worker() -> Iterator[subprocess.Popen]:
    from bench.celery_app import record_lateness
    from bench.servers import ROOT, python_env, stop_process

    beat = tempfile.mkdtemp(prefix="rivet-bench-beat-")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "bench.celery_app", "worker",
         "--pool", "prefork", "--concurrency", "2", "--without-mingle",
         "--without-gossip", "--loglevel", "WARNING", "-n", f"bench-{os.getpid()}@%h",
         "-B", "-s", os.path.join(beat, "schedule")],
        cwd=ROOT,
        env=python_env(),
    )  # fmt: skip
    try:
        record_lateness.apply_async(["probe", time.time()])
        redis_list("probe", 1, 120, proc)  # ready once it ran a task
        yield proc
    finally:
        stop_process(proc, timeout=20)
        shutil.rmtree(beat, ignore_errors=True)


def schedule_lateness(count: int, spread: float, lead: float) -> list[float]:
    from django_rivet import actors

    # Warm up connections and code paths on both sides (not measured).
    warm = actors.get_or_create("scheduleBench", "warm-up")
    warm.call("plan", [time.time() + 0.3 + i / 10 for i in range(5)])
    handles = [actors.get_or_create("scheduleBench", f"a{i}") for i in range(ACTORS)]
    deadline = time.monotonic() + 60
    while len(warm.call("lateness")) < 5:
        if time.monotonic() > deadline:
            raise TimeoutError("warm-up schedules never fired")
        time.sleep(0.2)
    times = due_times(count, spread, lead)
    for index, handle in enumerate(handles):
        handle.call("plan", times[index::ACTORS])
    time.sleep(max(0.0, times[-1] - time.time()) + 0.5)
    deadline = time.monotonic() + 120
    while True:
        found = [x for handle in handles for x in handle.call("lateness")]
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(found)} of {count} schedules fired")
        time.sleep(1)


def sleep_baseline(count: int, spread: float, lead: float) -> list[float]:
    lateness = []
    for due in due_times(count, spread, lead):
        delay = due - time.time()
        if delay > 0:
            threading.Event().wait(delay)
        lateness.append(time.time() - due)
    return lateness


def leg(mode: str, count: int, spread: float, lead: float) -> dict[str, Any]:
    if mode == "celery":
        from datetime import UTC, datetime

        from bench.celery_app import record_lateness

        with celery_worker() as proc:
            for due in due_times(count, spread, lead):
                record_lateness.apply_async(
                    ["baseline", due], eta=datetime.fromtimestamp(due, UTC)
                )
            baseline = redis_list("baseline", count, lead + spread + 120, proc)
            lateness = schedule_lateness(count, spread, lead)
        return {"baseline": stats(baseline), "schedules": stats(lateness)}
    from bench import internals

    baseline = sleep_baseline(count, spread, lead)
    internals.start_embedded_worker()
    try:
        lateness = schedule_lateness(count, spread, lead)
    finally:
        internals.stop_embedded_worker()
    return {"baseline": stats(baseline), "schedules": stats(lateness)}


def run(ctx: Any) -> list:
    count, spread, lead = ctx.size((200, 20.0, 3.0), (10, 0.5, 0.5))
    redis_url = ctx.servers.redis()
    out = []
    legs = (
        ("celery", "Celery+Redis", "bare Celery ETA", "0"),
        ("embedded", "embedded worker", "sleeping thread", "1"),
    )
    for mode, label, base_label, embedded in legs:
        env = {"RIVET_BENCH_REDIS_URL": redis_url, "RIVET_BENCH_EMBEDDED": embedded}
        found = ctx.leg(
            "bench.measures.p08_schedule:leg",
            {"mode": mode, "count": count, "spread": spread, "lead": lead},
            db="postgresql",
            env=env,
        )
        mine, base = found["schedules"], found["baseline"]
        out.append(
            Row(ID, f"lateness p99, {count} schedules over {spread:g} s, {label} "
                f"(p50 {mine['p50_ms']:.1f}, max {mine['max_ms']:.0f} ms)", "ms",
                summarize([mine["p99_ms"]]), summarize([base["p99_ms"]]), base_label,
                None, TARGET, found)
        )  # fmt: skip
    return out
