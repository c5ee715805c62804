"""The lease on a ``Workflow`` row: claim, renew (heartbeat) and release.

A claim is one conditional ``UPDATE`` that only matches a row nobody holds
(or whose holder stopped renewing): whoever's update matches owns the
workflow until it releases it or the lease expires. On databases with
``SKIP LOCKED`` (PostgreSQL) the row is first picked with ``SELECT ... FOR
UPDATE SKIP LOCKED`` so concurrent claimers skip it instead of queueing on
its lock; on SQLite the update is the first statement and takes the write
lock. Every write of the run re-checks the token (see
:class:`~django_rivet.workflows.driver.DjangoDriver`), and a
:class:`Heartbeat` renews the lease while a long step runs.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models import Case, F, Q, Value, When

from .. import clock
from ..conf import rivet_settings
from ..models import WORKFLOW_ACTIVE, Workflow, WorkflowStatus, db, sql
from ..models.workflows import UNSETTLED

logger = logging.getLogger("django_rivet.workflows")

__all__ = ["Heartbeat", "Lease", "claim", "lease_seconds", "release"]

_OWNER = f"{socket.gethostname()}:{os.getpid()}"


def lease_seconds() -> float:
    """Return how long a lease lasts without renewal."""
    return rivet_settings.WORKFLOW_LEASE_SECONDS


@dataclass(frozen=True, slots=True)
class Lease:
    """A claim on one workflow, as it was when claimed."""

    workflow_id: str
    token: str
    name: str
    status: str
    wake_at: datetime | None
    wake_signal: int
    cancel_requested: bool
    retry_count: int
    run: bool  # a run (counts, marks the row running) or an operation
    queue: str = ""  # its workflow queue ("": started directly)
    deadline_at: datetime | None = None
    cancel_reason: str = ""
    parent_id: str = ""
    detached: bool = False


def _claimable(now: datetime, *, run: bool) -> Q:
    free = Q(lease_token="")
    expired = ~Q(lease_token="") & Q(lease_expires_at__lt=now)
    if not run:
        # Operations (cancel, recover, replay) never take over a crashed
        # run's lease: the sweeper resumes that run first.
        return free
    return UNSETTLED & ((free & Q(wake_at__lte=now)) | expired)


def claim(workflow_id: str, *, run: bool = True) -> Lease | None:
    """Claim the lease on ``workflow_id``; return None if it is not available.

    A run claim (``run=True``) takes an unsettled workflow that is due, or
    whose lease expired, and marks it running (one whose cancel is still to
    be carried out stays ``cancelled``). An operation claim takes any
    workflow nobody holds, whatever its status or wake-up time.
    """
    now = clock.now_datetime()
    token = uuid.uuid4().hex
    claimable = _claimable(now, run=run)
    changes: dict[str, Any] = {
        "lease_token": token,
        "lease_owner": _OWNER,
        "lease_expires_at": clock.to_datetime(clock.now() + lease_seconds()),
    }
    if run:
        changes.update(
            status=Case(
                When(cancel_requested=True, then=F("status")),
                default=Value(WorkflowStatus.RUNNING),
            ),
            run_count=F("run_count") + 1,
            updated_at=now,
        )
    with db.atomic():
        rows = Workflow.objects.filter(pk=workflow_id)
        if sql.dialect(db.connection()).skip_locked:
            picked = rows.filter(claimable).select_for_update(skip_locked=True)
            if not picked.values_list("pk", flat=True):
                return None
        if not rows.filter(claimable).update(**changes):
            return None
        # Read under the lock the update took (the row lock on PostgreSQL,
        # the database write lock on SQLite).
        found = rows.values_list(
            "name",
            "status",
            "wake_at",
            "wake_signal",
            "cancel_requested",
            "retry_count",
            "queue",
            "deadline_at",
            "cancel_reason",
            "parent_id",
            "detached",
        ).get()
    name, status, wake_at, wake_signal, cancel_requested, retry_count = found[:6]
    queue, deadline_at, cancel_reason, parent_id, detached = found[6:]
    return Lease(
        workflow_id,
        token,
        name,
        status,
        wake_at,
        wake_signal,
        cancel_requested,
        retry_count,
        run=run,
        queue=queue,
        deadline_at=deadline_at,
        cancel_reason=cancel_reason,
        parent_id=parent_id,
        detached=detached,
    )


def release(lease: Lease, **fields: Any) -> dict[str, Any] | None:
    """Give the lease back, writing ``fields`` to the row.

    Returns the fields written, or None if the lease was no longer ours. If
    a message, a wake-up or a cancel arrived while the lease was held
    (``wake_signal`` moved, or ``cancel_requested`` is set), an active
    workflow is made due now instead, so the arrival is never lost. A cancel
    that returned while the lease was held wins over whatever the run
    ended with: the workflow stays ``cancelled``, due now, and the fields
    written say ``cancel_requested`` (the next run carries the cancel out).
    """
    now = clock.now_datetime()
    released = {
        "lease_token": "",
        "lease_owner": "",
        "lease_expires_at": None,
        "updated_at": now,
        **fields,
    }
    rows = Workflow.objects.filter(pk=lease.workflow_id, lease_token=lease.token)
    with db.atomic():
        # Quiet: nothing arrived since the claim (every arrival bumps the
        # signal), and no cancel is pending but one the claim saw (which the
        # holder carries out, or a resume withdraws).
        quiet = rows.filter(
            wake_signal=lease.wake_signal, cancel_requested=lease.cancel_requested
        )
        if quiet.update(**released):
            return released
        if released.get("status", lease.status) in WORKFLOW_ACTIVE:
            released["wake_at"] = now
        if released.get("cancel_requested") is not False:
            cancelling = {
                **released,
                "status": WorkflowStatus.CANCELLED,
                "cancel_requested": True,
                "wake_at": now,
            }
            if rows.filter(cancel_requested=True).update(**cancelling):
                return cancelling
        if rows.update(**released):
            return released
    logger.warning("workflow lease lost before release workflow=%s", lease.workflow_id)
    return None


class Heartbeat:
    """Renew a lease from a thread of its own while a run is in progress.

    The run's writes renew the lease too; the heartbeat covers long steps
    between writes. It opens a database connection only if it has to renew
    (runs shorter than one interval never do), and calls ``on_lost`` once if
    the lease turns out to be gone.
    """

    def __init__(self, lease: Lease, on_lost: Callable[[], None]) -> None:
        self.lease = lease
        self.on_lost = on_lost
        self.interval = max(lease_seconds() / 3.0, 0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run,
            name=f"rivet-heartbeat-{lease.workflow_id[:32]}",
            daemon=True,
        )

    def start(self) -> None:
        """Start renewing."""
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing and wait for the thread."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join()

    def _run(self) -> None:
        used = False
        try:
            while not self._stop.wait(self.interval):
                used = True
                expires = clock.to_datetime(clock.now() + lease_seconds())
                held = Workflow.objects.filter(
                    pk=self.lease.workflow_id, lease_token=self.lease.token
                ).update(lease_expires_at=expires)
                if not held:
                    logger.warning(
                        "workflow lease lost workflow=%s", self.lease.workflow_id
                    )
                    self.on_lost()
                    return
        except Exception:
            logger.exception(
                "workflow heartbeat failed workflow=%s", self.lease.workflow_id
            )
        finally:
            if used:
                connections.close_all()  # this thread's connections only
