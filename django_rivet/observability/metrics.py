"""Prometheus metrics (the ``prometheus`` extra: ``django-rivet[prometheus]``).

The import of ``prometheus_client`` is tried once, when this module is first
imported; without it :data:`INSTALLED` is False and nothing here is defined
beyond that flag. With it, the counters and histograms below live in
``prometheus_client``'s default registry (so django-prometheus' ``/metrics``
shows them too), and in its multi-process mode when
``PROMETHEUS_MULTIPROC_DIR`` is set before the process starts.

The gauges are read from the database when scraped (:mod:`.gauges`), by
:class:`DatabaseCollector`: every process sees the same rows, so they need no
multi-process aggregation. :func:`exposition` is what the metrics view
serves. Docs: docs/observability.md (the Grafana-ready list).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

from django.db import Error as DatabaseError

from . import gauges

try:
    from prometheus_client import (
        REGISTRY,
        CollectorRegistry,
        Counter,
        Histogram,
    )
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.exposition import choose_encoder
    from prometheus_client.multiprocess import MultiProcessCollector
except ImportError:  # pragma: no cover - exercised by the no-extras test
    INSTALLED = False
else:
    INSTALLED = True

logger = logging.getLogger("django_rivet.observability")

__all__ = [
    "INSTALLED",
    "DatabaseCollector",
    "exposition",
    "multiprocess",
    "register_database_collector",
]

# Seconds. Actions commit a transaction: sub-millisecond to a minute.
DURATION_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0,
)  # fmt: skip
# Seconds late: a Celery ETA fires within ~0.1 s; a sweep within SWEEP_INTERVAL.
LATENESS_BUCKETS = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
)  # fmt: skip

if INSTALLED:
    ACTIONS = Counter(
        "rivet_actions",
        "Actions run (HTTP, WebSocket, internal calls, schedules, cron), by outcome:"
        " ok, rejected (an error meant for the caller: 4xx, UserError) or error"
        " (a failure of the server: 5xx, an exception).",
        ["actor", "action", "transport", "outcome"],
    )
    ACTION_DURATION = Histogram(
        "rivet_action_duration_seconds",
        "Time an action took, lock wait and commit included.",
        ["actor", "action"],
        buckets=DURATION_BUCKETS,
    )
    QUEUE_MESSAGES = Counter(
        "rivet_queue_messages",
        "Queue messages handled, by outcome.",
        ["actor", "queue", "outcome"],
    )
    EVENTS_PUBLISHED = Counter(
        "rivet_events_published",
        "Events committed to actors' event logs and announced to subscribers.",
    )
    EVENTS_MISSED = Counter(
        "rivet_events_missed",
        "Times a connection was told actor/events_missed: the log no longer had"
        " events it had not received.",
    )
    SCHEDULE_LATENESS = Histogram(
        "rivet_schedule_lateness_seconds",
        "How long after its due time a schedule or cron run fired.",
        ["kind"],
        buckets=LATENESS_BUCKETS,
    )
    WORK_FAILED = Counter(
        "rivet_work_failed",
        "Background work that failed: a schedule, cron run or queue message whose"
        " handler raised, or a workflow that ended failed.",
        ["kind"],
    )
    WORKFLOW_STEPS = Counter(
        "rivet_workflow_steps",
        "Workflow step attempts, by outcome (ok, error, cancelled).",
        ["workflow", "outcome"],
    )
    WORKFLOW_RUNS = Counter(
        "rivet_workflow_runs",
        "Workflow runs (a worker running a workflow until it pauses), by the"
        " status they left it in.",
        ["workflow", "status"],
    )


def multiprocess() -> bool:
    """Tell whether prometheus_client runs in multi-process mode here."""
    return bool(
        os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        or os.environ.get("prometheus_multiproc_dir")
    )


class DatabaseCollector:
    """The gauges read from the database at scrape time (:func:`.gauges.read`)."""

    def describe(self) -> list[Any]:
        """Describe nothing, so registering never queries the database."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Read the gauges; a database failure skips them (and is logged)."""
        try:
            snapshot = gauges.read()
        except DatabaseError as exc:
            logger.warning("metrics: could not read the database gauges: %s", exc)
            return
        yield _labelled(
            "rivet_workflows",
            "Workflows by name and state (active states, and failed ones kept"
            " until retention).",
            ["workflow", "state"],
            snapshot.workflows,
        )
        yield GaugeMetricFamily(
            "rivet_workflows_stuck",
            "Active workflows whose lease expired over two sweep intervals ago and"
            " that no worker resumed (no sweeper runs).",
            value=snapshot.stuck_workflows,
        )
        yield _labelled(
            "rivet_queue_depth",
            "Queue messages not processed yet (pending or being handled).",
            ["actor", "queue"],
            snapshot.queue_depth,
        )
        yield _labelled(
            "rivet_workflow_queue_depth",
            "Workflows waiting in a workflow queue (WORKFLOW_QUEUES), not started.",
            ["queue"],
            snapshot.workflow_queue_depth,
        )
        yield GaugeMetricFamily(
            "rivet_schedules_pending",
            "One-shot schedules waiting for their time.",
            value=snapshot.schedules_pending,
        )
        yield _labelled(
            "rivet_connections",
            "Open WebSocket connections, by actor.",
            ["actor"],
            snapshot.connections,
        )


def _labelled(
    name: str, documentation: str, labels: list[str], counts: Mapping[Any, int]
) -> GaugeMetricFamily:
    """Return a gauge of ``counts`` by label values (a tuple, or one value)."""
    gauge = GaugeMetricFamily(name, documentation, labels=labels)
    for key, count in sorted(counts.items()):
        gauge.add_metric(list(key) if isinstance(key, tuple) else [key], count)
    return gauge


class _Registered:
    """Collect what another registry holds (the default one, in one process)."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield from self.registry.collect()


_database_collector: DatabaseCollector | None = None


def register_database_collector(registry: Any = None) -> DatabaseCollector:
    """Add the database gauges to ``registry`` (default: the default registry).

    For a project that serves django-prometheus' ``/metrics`` (or
    ``start_http_server``) in a single process and wants the gauges there
    too; the ``django_rivet.metrics`` view always includes them.
    """
    global _database_collector
    collector = DatabaseCollector()
    (REGISTRY if registry is None else registry).register(collector)
    if registry is None or registry is REGISTRY:
        _database_collector = collector
    return collector


def exposition(accept: str = "") -> tuple[bytes, str]:
    """Return the scrape body for an ``Accept`` header, and its content type.

    In multi-process mode every process's samples are read from
    ``PROMETHEUS_MULTIPROC_DIR`` (each scrape builds its registry, as
    prometheus_client's documentation asks); otherwise the default registry
    (with django-prometheus' metrics, if installed). The database gauges
    are added once, whichever it is.
    """
    registry = CollectorRegistry(auto_describe=False)
    if multiprocess():
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_Registered(REGISTRY))
    if multiprocess() or _database_collector is None:
        registry.register(DatabaseCollector())
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type
