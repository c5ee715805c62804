"""The overview page: what needs attention, linked to the filtered lists.

``/admin/django_rivet/overview/`` (the "Overview" entry of the app in the
admin index) shows failed work of the last 24 hours (workflows past their
deadline included), stuck workflows, actor and workflow queue depths, open
connections and how late schedules fired in the last hour, each count
linking to the change list filtered to exactly those rows. It
needs the ``django_rivet.view_overview`` permission (superusers have it).

Every figure is one bounded query: counts over partial indexes, and the
latency and failure charts over at most :data:`SAMPLE_LIMIT` recent rows.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from .. import clock
from ..models import (
    WORKFLOW_ACTIVE,
    Connection,
    CronRun,
    CronRunResult,
    Overview,
    QueueMessage,
    QueueMessageStatus,
    Schedule,
    ScheduleStatus,
    Workflow,
    WorkflowStatus,
)
from ..observability import gauges
from ..workflow_runtime.queues import queue_stats as workflow_queue_stats
from .charts import Series, bars
from .rendering import ReadOnlyAdmin

__all__ = ["OverviewAdmin", "percentile"]

# Rows read at most for a chart (the most recent ones).
SAMPLE_LIMIT = 5000
LATENESS_BUCKET = timedelta(minutes=5)


def percentile(values: Sequence[float], share: float) -> float | None:
    """Return the ``share`` quantile (0-1) of ``values``, None when empty."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[min(max(round(share * 100) - 1, 0), 98)]


def _changelist(model: type[Any], **filters: Any) -> str:
    url = reverse(f"admin:django_rivet_{model._meta.model_name}_changelist")
    return f"{url}?{urlencode(filters)}" if filters else url


def _iso(when: datetime) -> str:
    # With its offset: the admin parses it as an aware datetime.
    return when.isoformat(timespec="seconds")


def _age(elapsed: timedelta) -> str:
    seconds = max(elapsed.total_seconds(), 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def _hourly(times: Iterable[datetime | None], now: datetime) -> list[float | None]:
    counts: list[float | None] = [0.0] * 24
    for when in times:
        if when is None:
            continue
        hours_ago = int((now - when).total_seconds() // 3600)
        if 0 <= hours_ago < 24:
            slot = 23 - hours_ago
            counts[slot] = (counts[slot] or 0.0) + 1
    return counts


# What failed, by row kind: (label, model, the filters that select it).
FAILED: list[tuple[str, type[Any], dict[str, str]]] = [
    ("schedules", Schedule, {"status": ScheduleStatus.FAILED}),
    ("cron runs", CronRun, {"result": CronRunResult.ERROR}),
    ("queue messages", QueueMessage, {"status": QueueMessageStatus.FAILED}),
    ("workflows", Workflow, {"status": WorkflowStatus.FAILED}),
    # Cancelled because their deadline (@workflow(timeout=...)) passed.
    (
        "workflows past their deadline",
        Workflow,
        {"status": WorkflowStatus.CANCELLED, "cancel_reason": "timeout"},
    ),
]


def failed_work(now: datetime) -> dict[str, Any]:
    """Count what failed in the last 24 hours, with links and an hourly chart."""
    since = now - timedelta(days=1)
    times: list[datetime | None] = []
    counts = []
    for label, model, filters in FAILED:
        rows = model.objects.filter(**filters, finished_at__gte=since)
        recent = list(
            rows.order_by("-finished_at").values_list("finished_at", flat=True)[
                :SAMPLE_LIMIT
            ]
        )
        times += recent
        exact = {f"{field}__exact": value for field, value in filters.items()}
        link = _changelist(model, **exact, finished_at__gte=_iso(since))
        count = len(recent) if len(recent) < SAMPLE_LIMIT else rows.count()
        counts.append({"label": label, "count": count, "link": link})
    hours = [f"{(now - timedelta(hours=23 - h)):%H}:00" for h in range(24)]
    chart = bars(
        [Series("failed", _hourly(times, now), "#ba2121")],
        hours,
        description="Failed work per hour over the last 24 hours",
    )
    return {"rows": counts, "total": sum(r["count"] for r in counts), "chart": chart}


def stuck(now: datetime) -> dict[str, Any]:
    """Count active workflows whose lease expired and nobody resumed."""
    cutoff = gauges.stuck_cutoff(now)
    return {
        "count": Workflow.objects.filter(gauges.stuck_workflows(now)).count(),
        "link": _changelist(
            Workflow,
            status__in=",".join(WORKFLOW_ACTIVE),
            lease_expires_at__lt=_iso(cutoff),
        ),
    }


def queues(now: datetime) -> list[dict[str, Any]]:
    """List each queue's unprocessed messages and how long the oldest waits."""
    active = ",".join([QueueMessageStatus.PENDING, QueueMessageStatus.RUNNING])
    found = (
        QueueMessage.objects.active()
        .order_by()
        .values("actor__name", "queue")
        .annotate(depth=Count("pk"), oldest=Min("created_at"))
        .order_by("-depth")
    )
    return [
        {
            "actor": row["actor__name"],
            "queue": row["queue"],
            "depth": row["depth"],
            "waiting": _age(now - row["oldest"]),
            "link": _changelist(QueueMessage, status__in=active, queue=row["queue"]),
        }
        for row in found[:50]
    ]


def workflow_queues(now: datetime) -> list[dict[str, Any]]:
    """List each workflow queue: queued, running, and the oldest wait."""
    return [
        {
            "queue": stats.name,
            "depth": stats.depth,
            "running": stats.running,
            "waiting": "-"
            if stats.oldest_queued_at is None
            else _age(now - stats.oldest_queued_at),
            "link": _changelist(
                Workflow, queue=stats.name, status__exact=WorkflowStatus.QUEUED
            ),
        }
        for stats in workflow_queue_stats()[:50]
    ]


def connections() -> list[dict[str, Any]]:
    """List open connections per actor class."""
    counts = sorted(gauges.connection_counts().items(), key=lambda item: -item[1])
    return [
        {
            "actor": actor,
            "count": count,
            "link": _changelist(Connection, actor__name=actor),
        }
        for actor, count in counts
    ]


def lateness(now: datetime) -> dict[str, Any]:
    """How late schedules and cron runs fired over the last hour: p50/p99."""
    since = now - timedelta(hours=1)
    samples: list[tuple[datetime, float]] = []
    fired = (
        Schedule.objects.filter(
            status__in=[ScheduleStatus.DONE, ScheduleStatus.FAILED],
            finished_at__gte=since,
        )
        .exclude(fired_at=None)
        .order_by("-finished_at")
        .values_list("fired_at", "run_at")[:SAMPLE_LIMIT]
    )
    runs = (
        CronRun.objects.filter(fired_at__gte=since)
        .order_by("-fired_at")
        .values_list("fired_at", "scheduled_at")[:SAMPLE_LIMIT]
    )
    for fired_at, due in [*fired, *runs]:
        if fired_at is not None:
            samples.append((fired_at, max(0.0, (fired_at - due).total_seconds())))
    buckets = 12
    per_bucket: list[list[float]] = [[] for _ in range(buckets)]
    for fired_at, late in samples:
        slot = int((fired_at - since) / LATENESS_BUCKET)
        per_bucket[min(max(slot, 0), buckets - 1)].append(late)
    ordered = [sorted(bucket) for bucket in per_bucket]
    labels = [f"{since + LATENESS_BUCKET * (i + 1):%H:%M}" for i in range(buckets)]
    chart = bars(
        [
            Series("p50", [percentile(b, 0.5) for b in ordered], "#79aec8"),
            Series("p99", [percentile(b, 0.99) for b in ordered], "#417690"),
        ],
        labels,
        description="Schedule lateness p50 and p99 per 5 minutes over the last hour",
        unit=" s",
    )
    everything = sorted(late for _, late in samples)
    return {
        "count": len(everything),
        "p50": percentile(everything, 0.5),
        "p99": percentile(everything, 0.99),
        "chart": chart,
        "link": _changelist(
            Schedule,
            status__exact=ScheduleStatus.DONE,
            finished_at__gte=_iso(since),
        ),
    }


@admin.register(Overview)
class OverviewAdmin(ReadOnlyAdmin):
    """One page, no rows: the overview instead of a change list."""

    def get_urls(self) -> list[URLPattern]:
        """Serve only the page, under the change list's name (the index links it)."""
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "",
                self.admin_site.admin_view(self.overview_view),
                name="{}_{}_changelist".format(*info),
            )
        ]

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        """Render the overview (staff with the view permission only)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        now = clock.now_datetime()
        context = {
            **self.admin_site.each_context(request),
            "title": "Overview",
            "opts": self.opts,
            "now": now,
            "failed": failed_work(now),
            "stuck": stuck(now),
            "queues": queues(now),
            "workflow_queues": workflow_queues(now),
            "connections": connections(),
            "lateness": lateness(now),
            "schedules_pending": gauges.schedules_pending(),
        }
        return TemplateResponse(request, "admin/django_rivet/overview.html", context)
