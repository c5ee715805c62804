"""What the inspector says about retention: eligible rows, a workflow's purge."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse

from ..models import Workflow
from ..scheduling.cron import history_limit
from ..upkeep import retention
from .rendering import ReadOnlyAdmin

__all__ = ["RetentionAdmin", "describe_period", "purge_note"]

# Why rows of a table go, by model name (retention.TABLES).
_RULES = {
    "Workflow": "finished workflows are kept {WORKFLOW_RETENTION} after they finish",
    "WorkflowMessage": "a workflow's inbox goes with it",
    "WorkflowStream": "a workflow's streams go with it",
    "WorkflowStreamValue": "a workflow's streams go with it",
    "Schedule": "fired schedules are kept {SCHEDULE_RETENTION}",
    "QueueMessage": "processed messages are kept {QUEUE_RETENTION}",
}
_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60))


def describe_period(period: timedelta | None) -> str:
    """Say how long a retention period keeps rows ("7 days", "forever")."""
    if period is None:
        return "forever"
    seconds = period.total_seconds()
    for unit, size in _UNITS:
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} seconds"


def _rule(table: str) -> str:
    if table == "CronRun":
        keep = history_limit(None)
        every = "all" if keep is None else str(keep)
        return f"{every} runs are kept per cron job (CRON_HISTORY) by default"
    periods = {
        setting: describe_period(retention.retention(setting))
        for setting in retention.RETENTION_SETTINGS.values()
    }
    return _RULES[table].format(**periods)


class RetentionAdmin(ReadOnlyAdmin):
    """A read-only admin whose change list says how many rows can be purged."""

    change_list_template = "admin/django_rivet/retention_change_list.html"
    # The model's name in retention.TABLES.
    retention_table = ""

    def retention_summary(self) -> str:
        """Return the line shown above the change list."""
        count = retention.eligible()[self.retention_table].count()
        rows = "row is" if count == 1 else "rows are"
        return f"{count} {rows} eligible for purge now ({_rule(self.retention_table)})."

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Add the retention summary to the change list."""
        context = {"rivet_retention": self.retention_summary(), **(extra_context or {})}
        return super().changelist_view(request, context)


def purge_note(workflow: Workflow) -> str:
    """Say when retention deletes ``workflow``."""
    period = retention.retention("WORKFLOW_RETENTION")
    if not workflow.is_finished:
        return "Never while it has not finished."
    if period is None:
        return "Never: WORKFLOW_RETENTION is None (finished workflows are kept)."
    when = retention.purge_at(workflow)
    if when is None:
        return "Never: it has no finish time."
    return (
        f"At the first sweep after {when:%Y-%m-%d %H:%M:%S %Z} "
        f"({describe_period(period)} after it finished; WORKFLOW_RETENTION)."
    )
