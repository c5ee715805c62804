"""The statements of a workflow queue's admission pass (both databases)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .names import quote, table

__all__ = ["AdmissionSQL", "admission_statements"]


@dataclass(frozen=True, slots=True)
class AdmissionSQL:
    """The statements of a workflow queue's admission pass."""

    lock: str
    running: str
    started: str
    admit: str  # format with the SET clause of wake_fields' columns


def admission_statements(admitted: Sequence[str]) -> AdmissionSQL:
    """Return an admission pass's statements (:meth:`.Dialect.admission_sql`)."""
    workflows = table("Workflow")
    statuses = ", ".join(f"'{status}'" for status in admitted)
    of_queue = f"FROM {workflows} WHERE NOT ({quote('queue')} = '') AND queue = %s"
    status, id_, dedup = quote("status"), quote("id"), quote("dedup_key")
    return AdmissionSQL(
        lock=f"UPDATE {table('WorkflowQueue')} "
        f"SET {quote('admitted_at')} = %s WHERE {quote('name')} = %s",
        running=f"SELECT COUNT(*) {of_queue} AND {status} IN ({statuses})",
        started=f"SELECT COUNT(*) {of_queue} AND {quote('started_at')} > %s",
        # A debounced workflow's burst ends as it starts: its key is
        # free for the next one (workflows/debounces.py).
        admit=f"UPDATE {workflows} SET {status} = 'pending', "
        f"{quote('wake_at')} = %s, {quote('started_at')} = %s, "
        f"{quote('updated_at')} = %s, {dedup} = CASE WHEN "
        f"{quote('debounced')} THEN '' ELSE {dedup} END{{extra}} "
        f"WHERE {status} = 'queued' AND {id_} IN ("
        f"SELECT {id_} FROM {workflows} WHERE {quote('queue')} = %s "
        f"AND {status} = 'queued' AND ({quote('run_after')} IS NULL "
        f"OR {quote('run_after')} <= %s) ORDER BY {quote('priority')}, "
        f"{quote('created_at')}, {id_} LIMIT %s) RETURNING {id_}",
    )
