"""The sweeper: one pass that repairs whatever the broker or a crash lost.

The database is the source of truth; Celery tasks only make work prompt. A
sweep (``rivet.sweep`` on Celery beat every ``SWEEP_INTERVAL`` seconds, the
``rivet_sweep`` command, or the worker loop) runs the steps of
:data:`STEPS`, in order:

- ``recover_stale_claims``: claims whose firer died before committing go back
  to pending (a cron job gets its lost run back);
- ``enqueue_upcoming``: work entering the ETA horizon gets its Celery task
  (only near-term work gets one when it is created; Celery dispatch only);
- ``fire_lost``: schedules, cron runs and queue messages overdue by more than
  one sweep interval are fired right here, in this process;
- ``workflow_schedules``: due ticks of ``@workflow(cron=...)`` start their
  workflows, upcoming ones get their ETA tasks;
- ``workflow_queues``: an admission pass for every workflow queue with
  queued workflows;
- ``workflows``: wake-ups and expired workflow leases get a run task;
- ``connections``: connections of processes that stopped heartbeating are
  removed (``on_disconnect`` runs);
- ``purge_finished``: finished workflows, fired schedules and processed
  queue messages past their retention are deleted, one bounded batch per
  table (:mod:`.retention`).

Every step is safe with many sweepers at once: each row is claimed with a
conditional update (``SKIP LOCKED`` batches on PostgreSQL) before anything is
done with it. The steps live with what they repair (:mod:`~django_rivet.
scheduling.due`, :mod:`~django_rivet.workflows.wakeups`, ...); this module
only lists them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..actors.liveness import sweep_stale_connections
from ..scheduling.due import enqueue_upcoming, fire_lost, recover_stale_claims
from ..workflows import queues as workflow_queues
from ..workflows import scheduled, wakeups
from .retention import purge_pass

logger = logging.getLogger("django_rivet.sweeper")

__all__ = [
    "STEPS",
    "SweepStep",
    "purge_finished",
    "steps",
    "sweep",
]

# Upper bound on the work one step does in one sweep, so a sweep stays short
# and several sweepers share a backlog.
STEP_BATCH = 500


@dataclass(frozen=True, slots=True)
class SweepStep:
    """One step of a sweep: ``run()`` returns how many rows it handled."""

    name: str
    run: Callable[[], int]


def purge_finished() -> int:
    """Delete one batch per table of what retention lets go; return the rows."""
    return sum(purge_pass(STEP_BATCH).values())


# The steps, in the order a sweep runs them. Each lambda looks its function
# up when it runs, so a test can replace one.
STEPS: tuple[SweepStep, ...] = (
    SweepStep("recover_stale_claims", lambda: recover_stale_claims()),
    SweepStep("enqueue_upcoming", lambda: enqueue_upcoming(STEP_BATCH)),
    SweepStep("fire_lost", lambda: fire_lost(STEP_BATCH)),
    SweepStep("workflow_schedules", lambda: scheduled.sweep()),
    SweepStep("workflow_queues", lambda: workflow_queues.admit_due()),
    SweepStep("workflows", lambda: wakeups.sweep()),
    SweepStep("connections", lambda: sweep_stale_connections()),
    SweepStep("purge_finished", lambda: purge_finished()),
)


def steps() -> list[SweepStep]:
    """Return the steps of a sweep, in order."""
    return list(STEPS)


def sweep(steps: Sequence[SweepStep] | None = None) -> dict[str, int]:
    """Run every step once; return ``{step name: rows handled}``.

    ``steps`` defaults to :data:`STEPS`. A failing step is logged and the
    others still run.
    """
    counts: dict[str, int] = {}
    for step in STEPS if steps is None else steps:
        started = time.monotonic()
        try:
            counts[step.name] = step.run()
        except Exception:
            logger.exception("sweep step failed step=%s", step.name)
            counts[step.name] = 0
        if counts[step.name]:
            logger.info(
                "sweep step=%s handled=%s seconds=%.3f",
                step.name,
                counts[step.name],
                time.monotonic() - started,
            )
    return counts
