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

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.db.models import Case, Value, When
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .. import clock
from ..conf import rivet_settings
from ..models import WORKFLOW_ACTIVE, Workflow, WorkflowStatus, db, sql
from . import history_cache, versions

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
    # The history mark the claim set (history_cache: "c:" + the token of the
    # release whose history is unchanged since, when it is).
    history_mark: str = ""


# What a claim reads of the row it claimed (Lease's fields after the token).
_CLAIMED = (
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
    "history_mark",
)


def claim(workflow_id: str, *, run: bool = True) -> Lease | None:
    """Claim the lease on ``workflow_id``; return None if it is not available.

    A run claim (``run=True``) takes an unsettled workflow that is due, or
    whose lease expired, and marks it running (one whose cancel is still to
    be carried out stays ``cancelled``). An operation claim takes any
    workflow nobody holds, whatever its status or wake-up time (operations
    -- cancel, recover, replay -- never take over a crashed run's lease: the
    sweeper resumes that run first). A run claim in a process with an
    ``APP_VERSION`` takes only a workflow of that version or of none. One
    statement (:meth:`~..models.sql.Dialect.lease_claim_sql`): its own
    transaction in autocommit, which takes the row lock on PostgreSQL
    (skipping a row another transaction holds) and the write lock on SQLite.
    """
    connection = db.connection()
    now = clock.now_datetime()
    token = uuid.uuid4().hex
    when = connection.ops.adapt_datetimefield_value
    expires = when(clock.to_datetime(clock.now() + lease_seconds()))
    params: list[Any] = [token, _OWNER, expires]
    # A run claim takes only a run this process's version may run
    # (versions.py); an operation (cancel, recover...) any version's.
    version = versions.current() if run else ""
    if run:
        params += [when(now), workflow_id, when(now), when(now)]
    else:
        params.append(workflow_id)
    if version:
        params.append(version)
    # A run's claim alone in its transaction need not wait for the disk: lost
    # in a crash, the workflow is simply claimed again (its run's writes are
    # fenced by the token, and their durable commits flush the claim first).
    statement = sql.dialect(connection).lease_claim_sql(
        run,
        WORKFLOW_ACTIVE,
        _CLAIMED,
        versioned=bool(version),
        deferred=run and not connection.in_atomic_block,
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        found = cursor.fetchone()
    if found is None:
        return None
    row = dict(zip(_CLAIMED, found[: len(_CLAIMED)], strict=True))
    return Lease(
        workflow_id,
        token,
        row["name"],
        row["status"],
        _datetime(row["wake_at"]),
        int(row["wake_signal"]),
        bool(row["cancel_requested"]),
        int(row["retry_count"]),
        run=run,
        queue=row["queue"],
        deadline_at=_datetime(row["deadline_at"]),
        cancel_reason=row["cancel_reason"],
        parent_id=row["parent_id"],
        detached=bool(row["detached"]),
        history_mark=row["history_mark"],
    )


def _datetime(value: Any) -> datetime | None:
    """Return a timestamp column read by raw SQL as an aware datetime."""
    if value is None or isinstance(value, datetime):
        return (
            value
            if value is None or timezone.is_aware(value)
            else (timezone.make_aware(value, UTC))
        )
    parsed = parse_datetime(str(value))
    if parsed is not None and timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, UTC)
    return parsed


def release(
    lease: Lease,
    *,
    write: Callable[[bool], None] | None = None,
    **fields: Any,
) -> dict[str, Any] | None:
    """Give the lease back, writing ``fields`` to the row.

    Returns the fields written, or None if the lease was no longer ours. If
    a message, a wake-up or a cancel arrived while the lease was held
    (``wake_signal`` moved, or ``cancel_requested`` is set), an active
    workflow is made due now instead, so the arrival is never lost. A cancel
    that returned while the lease was held wins over whatever the run
    ended with: the workflow stays ``cancelled``, due now, and the fields
    written say ``cancel_requested`` (the next run carries the cancel out).
    When nothing arrived, the fields returned also hold ``awaited_by`` as
    the release read it (the workflows waiting for this one's end), which
    spares a finished workflow's release a read of its own row.

    ``write(checked)``: the holder's last writes, in the same transaction.
    After a quiet release they need no lease check of their own
    (``checked=False``): the release's write matched the token and holds
    the row's lock (SQLite's write lock) until the commit. Otherwise they
    come first and check the lease themselves (``checked=True``), raising
    :class:`~.driver.LeaseLost` when it is gone.
    """
    history_cache.cache.evict(lease.workflow_id)  # a run's driver keeps its own
    now = clock.now_datetime()
    released = {
        "lease_token": "",
        "lease_owner": "",
        "lease_expires_at": None,
        "updated_at": now,
        "history_mark": lease.token,  # unless reset meanwhile (MARK_RELEASED)
        **fields,
    }
    # In the caller's transaction when there is one (a run's release, with
    # its last batch): no savepoint, a failure rolls back both.
    with db.atomic(savepoint=False):
        # Quiet: nothing arrived since the claim (every arrival bumps the
        # signal), and no cancel is pending but one the claim saw (which the
        # holder carries out, or a resume withdraws).
        awaited_by = _release_quiet(lease, released)
        if awaited_by is not None:
            if write is not None:
                write(False)
            return {**released, "awaited_by": awaited_by}
        if write is not None:
            write(True)
        released["history_mark"] = _mark_released(lease.token)
        rows = Workflow.objects.filter(pk=lease.workflow_id, lease_token=lease.token)
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


def _release_quiet(lease: Lease, released: dict[str, Any]) -> list[Any] | None:
    """Release if nothing arrived since the claim; return ``awaited_by`` if so.

    One hand-written statement: every run ends here, and the ORM's update
    (building and compiling the query) cost more than running it.
    """
    connection = db.connection()
    names = sorted(released)  # plain values (no expressions), by field name
    fields = [_FIELDS[name] for name in names]
    params = [
        db.prep_save(field, released[name], connection)
        for name, field in zip(names, fields, strict=True)
    ]
    params += [lease.workflow_id, lease.token, lease.wake_signal]
    params.append(lease.cancel_requested)
    columns = [str(field.column) for field in fields]
    statement = sql.dialect(connection).lease_release_sql(columns)
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        found = cursor.fetchone()
    if found is None:
        return None
    waiting = found[0]
    if isinstance(waiting, str | bytes):  # a JSON column read as text
        waiting = json.loads(waiting)
    return list(waiting or [])


def _mark_released(token: str) -> Case:
    """Return the mark a release writes: ``token``, unless reset meanwhile."""
    return Case(When(history_mark="", then=Value("")), default=Value(token))


# The row's fields by name and attribute name (what ``update()`` accepts).
_FIELDS = {
    name: field
    for field in Workflow._meta.concrete_fields
    for name in (field.name, field.attname)
}


class Heartbeat:
    """Renew a lease while a run is in progress, from the process's renewer.

    The run's writes renew the lease too; the heartbeat covers long steps
    between writes. Every heartbeat of a process is served by one renewer
    thread (:class:`_Renewer`), so a run pays for no thread of its own: a
    run shorter than one interval never renews. ``on_lost`` is called once
    (from the renewer's thread) if the lease turns out to be gone.
    """

    def __init__(self, lease: Lease, on_lost: Callable[[], None]) -> None:
        self.lease = lease
        self.on_lost = on_lost
        self.interval = max(lease_seconds() / 3.0, 0.05)
        self.due = 0.0  # time.monotonic() of the next renewal

    def start(self) -> None:
        """Start renewing."""
        self.due = time.monotonic() + self.interval
        _renewer().add(self)

    def stop(self) -> None:
        """Stop renewing (waits for a renewal of this lease in progress)."""
        _renewer().remove(self)

    def renew(self) -> bool:
        """Renew the lease once; False (``on_lost`` called) if it is gone."""
        expires = clock.to_datetime(clock.now() + lease_seconds())
        held = Workflow.objects.filter(
            pk=self.lease.workflow_id, lease_token=self.lease.token
        ).update(lease_expires_at=expires)
        if held:
            self.due = time.monotonic() + self.interval
            return True
        logger.warning("workflow lease lost workflow=%s", self.lease.workflow_id)
        self.on_lost()
        return False


class _Renewer:
    """The thread renewing this process's heartbeats when each is due.

    It opens a database connection only when a lease needs renewing, and
    closes it once no heartbeat is left.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.beats: set[Heartbeat] = set()
        self.changed = threading.Condition()
        self.renewing = threading.Lock()  # held while one renewal runs
        self.thread: threading.Thread | None = None
        self.connected = False  # the thread has a database connection open

    def add(self, beat: Heartbeat) -> None:
        with self.changed:
            # The thread sleeps until the earliest renewal: wake it only
            # when this one comes first (most runs end before theirs).
            first = all(beat.due < other.due for other in self.beats)
            self.beats.add(beat)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self._run, name="rivet-heartbeat", daemon=True
                )
                self.thread.start()
            elif first:
                self.changed.notify()

    def remove(self, beat: Heartbeat) -> None:
        with self.renewing, self.changed:
            self.beats.discard(beat)
            if not self.beats and self.connected:
                self.changed.notify()  # to close its connection now

    def _due(self, used: bool) -> list[Heartbeat]:
        """Wait until a heartbeat is due; return the due ones (with the lock).

        An empty list: no heartbeat is left and the connection is open.
        """
        while True:
            now = time.monotonic()
            due = [beat for beat in self.beats if beat.due <= now]
            if due:
                return due
            if not self.beats:
                if used:
                    return []
                self.changed.wait()  # until a heartbeat is added
                continue
            self.changed.wait(min(beat.due for beat in self.beats) - now)

    def _run(self) -> None:
        while True:
            with self.changed:
                due = self._due(self.connected)
            if not due:
                connections.close_all()  # this thread's connections only
                self.connected = False
                continue
            for beat in due:
                with self.renewing:
                    if beat not in self.beats:
                        continue  # stopped meanwhile
                    self.connected = True
                    try:
                        if not beat.renew():
                            with self.changed:
                                self.beats.discard(beat)
                    except Exception:
                        beat.due = time.monotonic() + beat.interval
                        logger.exception(
                            "workflow heartbeat failed workflow=%s",
                            beat.lease.workflow_id,
                        )


_shared: _Renewer | None = None
_shared_lock = threading.Lock()


def _renewer() -> _Renewer:
    """Return this process's renewer (a forked child makes its own)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.pid != os.getpid():
            _shared = _Renewer()
        return _shared
