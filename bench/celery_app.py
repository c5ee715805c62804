"""Celery app of P8's worker leg (``celery -A bench.celery_app worker``)."""

import os
import time

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
app = Celery("rivet_bench")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["django_rivet"])


@app.on_after_configure.connect
def _add_rivet_sweep(sender, **kwargs):  # type: ignore[no-untyped-def]
    # Beat runs django-rivet's sweep, as in production.
    from django_rivet.tasks import beat_schedule

    sender.conf.beat_schedule = beat_schedule()


@app.task(name="bench.record_lateness")
def record_lateness(key: str, due: float) -> None:
    """Baseline: record how late this bare ETA task runs (in Redis)."""
    import redis

    late = time.time() - due
    redis.Redis.from_url(os.environ["RIVET_BENCH_REDIS_URL"]).rpush(key, late)
