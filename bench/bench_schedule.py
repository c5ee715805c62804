"""Lateness of 200 schedules due over 20 seconds, per way of firing them.

Legs (PostgreSQL with default durability unless noted):

- ``celery-redis``: a Celery worker (prefork, 2 processes) on Redis; each
  schedule's ETA task is sent after the commit that created it;
- ``celery-filesystem``: the same worker on kombu's ``filesystem://`` broker
  (no server; polling every 0.1 s), the no-server Celery setup;
- ``embedded-postgresql`` / ``embedded-sqlite``: the embedded worker (a thread
  of the process creating the schedules, as in ``make run``).

Lateness is ``finished_at - run_at`` of each schedule: when its action had
run (just before the commit) minus when it was due. Baselines measured in
the same run: bare Celery ETA tasks on the same broker recording their own
lateness, and for the embedded loop, a thread sleeping until each due time.
Run with ``scripts/bench.sh schedule``; writes ``bench/results/schedule.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from celery import Celery

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import postgres, run_leg, write_results  # noqa: E402

COUNT = 200
SPREAD = 20.0  # seconds over which the schedules fall due
LEAD = 3.0  # seconds between creating them and the first one being due
ACTORS = 20

# -- the Celery app of the worker legs (``celery -A bench.bench_schedule``) ----------
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
app = Celery("bench_schedule")
app.config_from_object("django.conf:settings", namespace="CELERY")
if os.environ.get("RIVET_BENCH_FS_BROKER"):
    folder = os.environ["RIVET_BENCH_FS_BROKER"]
    app.conf.broker_url = "filesystem://"
    app.conf.broker_transport_options = {
        "data_folder_in": os.path.join(folder, "queue"),
        "data_folder_out": os.path.join(folder, "queue"),
        "processed_folder": os.path.join(folder, "processed"),
        # kombu's default is ./control, inside whatever the cwd is.
        "control_folder": os.path.join(folder, "control"),
        "store_processed": False,
        "polling_interval": 0.1,
    }
app.conf.task_ignore_result = True
app.autodiscover_tasks(["django_rivet"])


@app.on_after_configure.connect
def _add_rivet_sweep(sender, **kwargs):  # type: ignore[no-untyped-def]
    from django_rivet.tasks import beat_schedule

    sender.conf.beat_schedule = beat_schedule()


@app.task(name="bench.record_lateness")
def record_lateness(key: str, due: float) -> None:
    """Baseline: record how late this ETA task runs (in Redis)."""
    import redis

    late = time.time() - due
    client = redis.Redis.from_url(os.environ["RIVET_BENCH_REDIS_URL"])
    client.rpush(key, late)


def _register_actor() -> None:
    from django_rivet import Actor, action
    from django_rivet.actors import registry

    class ScheduleBench(Actor):
        name = "scheduleBench"

        @action
        def plan(self, ctx, run_ats: list) -> int:
            for run_at in run_ats:
                ctx.schedule.at(run_at, "ring")
            return len(run_ats)

        @action
        def ring(self, ctx) -> None:
            pass

    with contextlib.suppress(Exception):
        registry.register(ScheduleBench)


with contextlib.suppress(ImportError):  # the worker processes need the actor
    _register_actor()


# -- one leg, in a process of its own ----------------------------------------------
def stats(lateness_s: list[float]) -> dict[str, float]:
    values = sorted(x * 1000 for x in lateness_s)
    return {
        "n": len(values),
        "p50_ms": statistics.median(values),
        "p99_ms": values[max(int(len(values) * 0.99) - 1, 0)],
        "max_ms": values[-1],
    }


def due_times() -> list[float]:
    start = time.time() + LEAD
    return [start + SPREAD * i / COUNT for i in range(COUNT)]


_worker: subprocess.Popen | None = None


class WorkerDied(Exception):
    """The Celery worker of the leg exited (see its output above)."""


def check_worker() -> None:
    if _worker is not None and _worker.poll() is not None:
        raise WorkerDied(f"the Celery worker exited with code {_worker.returncode}")


@contextlib.contextmanager
def celery_worker() -> Iterator[None]:
    """Run a worker with beat, as in production (the sweeper covers losses)."""
    beat = tempfile.mkdtemp(prefix="rivet-bench-beat-")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "bench.bench_schedule", "worker",
         "--pool", "prefork", "--concurrency", "2", "--without-mingle",
         "--without-gossip", "--loglevel", "WARNING", "-n", f"bench-{os.getpid()}@%h",
         "-B", "-s", os.path.join(beat, "schedule")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    global _worker
    _worker = proc
    try:
        # Ready once it ran a probe task.
        wait_for_redis_list("probe", 1, [time.time()])
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        shutil.rmtree(beat, ignore_errors=True)
        _worker = None


def redis_client():  # type: ignore[no-untyped-def]
    import redis

    return redis.Redis.from_url(os.environ["RIVET_BENCH_REDIS_URL"])


def wait_for_redis_list(key: str, count: int, probe: list[float] | None = None) -> list:
    client = redis_client()
    deadline = time.monotonic() + 120
    while client.llen(key) < count:
        check_worker()
        if probe:
            record_lateness.apply_async([key, probe[0]])
            probe = None
        if time.monotonic() > deadline:
            raise TimeoutError(f"{key}: {client.llen(key)} of {count}")
        time.sleep(0.1)
    return [float(x) for x in client.lrange(key, 0, -1)]


def eta_baseline() -> list[float]:
    from datetime import UTC, datetime

    for due in due_times():
        record_lateness.apply_async(
            ["baseline", due], eta=datetime.fromtimestamp(due, UTC)
        )
    return wait_for_redis_list("baseline", COUNT)


def sleep_baseline() -> list[float]:
    lateness = []
    for due in due_times():
        delay = due - time.time()
        if delay > 0:
            threading.Event().wait(delay)
        lateness.append(time.time() - due)
    return lateness


def wait_for_schedules(count: int):  # type: ignore[no-untyped-def]
    from django_rivet.models import Schedule, ScheduleStatus

    deadline = time.monotonic() + LEAD + SPREAD + 120
    done = Schedule.objects.filter(status=ScheduleStatus.DONE)
    while done.count() < count:
        check_worker()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{done.count()} of {count} schedules fired")
        time.sleep(0.2)
    return done


def schedule_lateness() -> list[float]:
    from django_rivet import actors
    from django_rivet.models import Schedule

    # Warm up connections and caches on the firing side (not measured).
    warm = actors.get_or_create("scheduleBench", "warm-up")
    warm.call("plan", [time.time() + 0.5 + i / 10 for i in range(10)])
    wait_for_schedules(10)
    Schedule.objects.all().delete()
    times = due_times()
    per_actor = COUNT // ACTORS
    for index in range(ACTORS):
        handle = actors.get_or_create("scheduleBench", f"a{index}")
        handle.call("plan", times[index::ACTORS][:per_actor])
    done = wait_for_schedules(COUNT)
    return [
        (finished - run_at).total_seconds()
        for run_at, finished in done.values_list("run_at", "finished_at")
    ]


def leg(label: str) -> dict:
    from bench.common import setup_django

    setup_django()
    from django.test.utils import override_settings

    from django_rivet.models import Actor

    Actor.objects.all().delete()
    redis_client().flushdb()
    if label.startswith("celery"):
        with celery_worker():
            baseline = eta_baseline()
            lateness = schedule_lateness()
        return {"baseline_celery_eta": stats(baseline), "schedules": stats(lateness)}
    import logging

    from django_rivet.scheduling import worker

    class Errors(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.ERROR)
            self.seen: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.seen.append(record.getMessage())

    errors = Errors()
    logging.getLogger("django_rivet").addHandler(errors)
    with override_settings(RIVET={"EMBEDDED_WORKER": True}):
        baseline = sleep_baseline()
        worker.start_embedded_worker()
        try:
            lateness = schedule_lateness()
        finally:
            worker.stop_embedded_worker()
    result = {"baseline_sleep": stats(baseline), "schedules": stats(lateness)}
    if errors.seen:  # a failing iteration makes the loop sleep a full poll
        result["worker_errors"] = sorted(set(errors.seen))
    return result


# -- orchestration -------------------------------------------------------------------
@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="rivet-bench-redis-")
    script = str(ROOT / "scripts" / "redis.sh")
    url = subprocess.run(
        [script, "start", folder], check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        yield url
    finally:
        subprocess.run([script, "stop", folder], check=False)


def run_with_retries(label: str, env: dict[str, str], attempts: int = 3) -> dict:
    """Run a leg; retry when its worker crashed (kombu's filesystem transport
    can read a message file while the producer is still writing it, which
    kills the worker with JSONDecodeError)."""
    crashes = []
    base = env.get("RIVET_BENCH_FS_BROKER")
    for attempt in range(1, attempts + 1):
        print(f"  {label} (attempt {attempt})...", flush=True)
        if base is not None:  # a clean broker folder per attempt
            folder = os.path.join(base, f"attempt-{attempt}")
            for sub in ("queue", "processed", "control"):
                os.makedirs(os.path.join(folder, sub))
            env = {**env, "RIVET_BENCH_FS_BROKER": folder}
        try:
            result = run_leg(__file__, label, env)
        except subprocess.CalledProcessError as failed:
            reason = next(
                (
                    line.strip()
                    for line in failed.stderr.splitlines()
                    if "Unrecoverable error" in line or "WorkerDied" in line
                ),
                failed.stderr.strip().splitlines()[-1] if failed.stderr else "?",
            )
            print(f"    failed: {reason}", flush=True)
            crashes.append(reason)
            continue
        result["worker_crashes"] = crashes
        return result
    sys.exit(f"leg {label} failed {attempts} times: {crashes}")


def main() -> None:
    report: dict[str, dict] = {}
    work = tempfile.mkdtemp(prefix="rivet-bench-schedule-")
    try:
        with redis_server() as redis_url, postgres() as pg_url:
            common = {"RIVET_BENCH_REDIS_URL": redis_url}
            fs = os.path.join(work, "broker")
            legs = {
                "celery-redis": {**common, "RIVET_BENCH_DATABASE_URL": pg_url},
                "celery-filesystem": {
                    **common,
                    "RIVET_BENCH_DATABASE_URL": pg_url,
                    "RIVET_BENCH_FS_BROKER": fs,
                },
                "embedded-postgresql": {**common, "RIVET_BENCH_DATABASE_URL": pg_url},
                "embedded-sqlite": {
                    **common,
                    "RIVET_BENCH_SQLITE": os.path.join(work, "bench.sqlite3"),
                },
            }
            for label, env in legs.items():
                report[label] = run_with_retries(label, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"\n{COUNT} schedules due over {SPREAD:g} s; lateness in ms\n"
        f"{'leg':<22} {'measure':<22} {'p50':>8} {'p99':>8} {'max':>8}"
    )
    for label, results in report.items():
        for measure, values in results.items():
            if measure in ("worker_crashes", "worker_errors"):
                if values:
                    print(f"{label:<22} {measure}: {values}")
                continue
            print(
                f"{label:<22} {measure:<22} {values['p50_ms']:>8.1f} "
                f"{values['p99_ms']:>8.1f} {values['max_ms']:>8.1f}"
            )
    print("written", write_results("schedule", report))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--leg":
        print(json.dumps(leg(sys.argv[2])))
    else:
        main()
