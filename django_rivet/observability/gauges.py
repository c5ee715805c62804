"""What the database says right now: the gauges of a scrape and the overview.

Each reading is one aggregate query over rows a partial index already
narrows (active and queued workflows, pending messages and schedules,
live connections), so a scrape costs a fixed number of queries whatever the
traffic: six, none of which reads finished history. Label values come from
names the code defines (workflow, actor and queue names), never from keys or
ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Q

from .. import clock
from ..conf import rivet_settings
from ..models import (
    WORKFLOW_ACTIVE,
    Connection,
    QueueMessage,
    Schedule,
    ScheduleStatus,
    Workflow,
    WorkflowStatus,
)

__all__ = [
    "Snapshot",
    "connection_counts",
    "queue_depths",
    "read",
    "schedules_pending",
    "stuck_count",
    "stuck_cutoff",
    "stuck_workflows",
    "workflow_counts",
    "workflow_queue_depths",
]

# Workflow states the rivet_workflows gauge counts: the active ones, and the
# failed ones retention still keeps (what people act on). Completed and
# cancelled workflows are history, not state: the count would only grow.
GAUGE_STATES = [*WORKFLOW_ACTIVE, WorkflowStatus.FAILED]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One reading of the database's gauges."""

    workflows: dict[tuple[str, str], int]  # (workflow name, state) -> count
    stuck_workflows: int
    # (actor name, queue name) -> messages not processed yet
    queue_depth: dict[tuple[str, str], int]
    schedules_pending: int
    connections: dict[str, int]  # actor name -> open connections
    # workflow queue name (WORKFLOW_QUEUES) -> workflows queued, not started
    workflow_queue_depth: dict[str, int]


def stuck_cutoff(now: datetime | None = None) -> datetime:
    """Return the time before which an expired lease means a stuck workflow.

    A crashed worker's lease expires and the next sweep (every
    ``SWEEP_INTERVAL``) hands the workflow to another worker; a lease that
    expired more than two sweeps ago was not picked up: no sweeper runs.
    """
    now = now or clock.now_datetime()
    return now - timedelta(seconds=2 * float(rivet_settings.SWEEP_INTERVAL))


def stuck_workflows(now: datetime | None = None) -> Q:
    """Filter active workflows whose lease expired and nobody resumed."""
    return Q(status__in=WORKFLOW_ACTIVE, lease_expires_at__lt=stuck_cutoff(now))


def workflow_counts() -> dict[tuple[str, str], int]:
    """Count workflows by (name, state), for the states of :data:`GAUGE_STATES`."""
    rows = (
        Workflow.objects.filter(status__in=GAUGE_STATES)
        .order_by()
        .values("name", "status")
        .annotate(n=Count("pk"))
    )
    return {(row["name"], row["status"]): row["n"] for row in rows}


def stuck_count(now: datetime | None = None) -> int:
    """Count stuck workflows (:func:`stuck_workflows`)."""
    return Workflow.objects.filter(stuck_workflows(now)).count()


def queue_depths() -> dict[tuple[str, str], int]:
    """Count unprocessed queue messages by (actor name, queue name)."""
    rows = (
        QueueMessage.objects.active()
        .order_by()
        .values("actor__name", "queue")
        .annotate(n=Count("pk"))
    )
    return {(row["actor__name"], row["queue"]): row["n"] for row in rows}


def workflow_queue_depths() -> dict[str, int]:
    """Count queued workflows (not started yet) by workflow queue name."""
    rows = (
        Workflow.objects.filter(status=WorkflowStatus.QUEUED)
        .order_by()
        .values("queue")
        .annotate(n=Count("pk"))
    )
    return {row["queue"]: row["n"] for row in rows}


def schedules_pending() -> int:
    """Count one-shot schedules waiting for their time."""
    return Schedule.objects.filter(status=ScheduleStatus.PENDING).count()


def connection_counts() -> dict[str, int]:
    """Count open connections by actor name."""
    rows = Connection.objects.order_by().values("actor__name").annotate(n=Count("pk"))
    return {row["actor__name"]: row["n"] for row in rows}


def read() -> Snapshot:
    """Read every gauge (six aggregate queries)."""
    return Snapshot(
        workflows=workflow_counts(),
        stuck_workflows=stuck_count(),
        queue_depth=queue_depths(),
        schedules_pending=schedules_pending(),
        connections=connection_counts(),
        workflow_queue_depth=workflow_queue_depths(),
    )
