"""Storage of django-rivet.

Runtime records are written by the runtime and shown read-only in the admin.
Values are CBOR bytes (see :mod:`django_rivet.encoding`); KV keys are raw
bytes compared bytewise (SQLite BLOB and PostgreSQL bytea both order by
memcmp, which the KV tests check with 0x00 and 0xFF keys).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models

from . import clock
from .encoding import cbor_loads


def _now() -> Any:
    # Record timestamps follow the project clock so frozen-time tests see
    # consistent values.
    return clock.now_datetime()


class Actor(models.Model):
    """One actor instance, identified by ``(name, key)`` and by ``id``."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=64)
    # Canonical form of the key parts (compact JSON list), unique per name.
    key = models.TextField()
    key_parts = models.JSONField(default=list)
    state = models.BinaryField(default=b"")
    # Bumped on every state write; lets a process reuse its decoded state.
    version = models.PositiveBigIntegerField(default=0)
    # Last event sequence number handed out (the replayable event log).
    event_seq = models.PositiveBigIntegerField(default=0)
    # Bytes of KV keys and values, for the per-actor KV quota.
    kv_size = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(default=_now)
    updated_at = models.DateTimeField(default=_now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["name", "key"], name="rivet_actor_unique_name_key"
            ),
        ]
        ordering = ["name", "key"]

    def __str__(self) -> str:
        return f"{self.name}{self.key}"

    @property
    def key_tuple(self) -> tuple[str, ...]:
        """Return the key parts as a tuple of str."""
        return tuple(self.key_parts)

    def decoded_state(self) -> Any:
        """Return the decoded state (``None`` before creation finished)."""
        data = bytes(self.state)
        return cbor_loads(data, max_depth=400) if data else None


class ActorKV(models.Model):
    """One key of an actor's KV store."""

    id = models.BigAutoField(primary_key=True)
    actor = models.ForeignKey(
        Actor, on_delete=models.CASCADE, related_name="kv_entries", db_index=False
    )
    key = models.BinaryField()
    value = models.BinaryField()

    class Meta:
        verbose_name = "actor KV entry"
        verbose_name_plural = "actor KV entries"
        constraints = [
            # Also the index that serves ordered prefix and range scans.
            models.UniqueConstraint(
                fields=["actor", "key"], name="rivet_actorkv_unique_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.actor_id}:{bytes(self.key)!r}"


class Connection(models.Model):
    """A live WebSocket connection to an actor, in whichever process holds it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    actor = models.ForeignKey(
        Actor, on_delete=models.CASCADE, related_name="connections"
    )
    # Channel-layer name of the consumer holding the socket.
    channel_name = models.CharField(max_length=255)
    # Identifies the process, for the liveness sweep of crashed processes.
    server_id = models.CharField(max_length=128, db_index=True)
    params = models.BinaryField(default=b"")
    state = models.BinaryField(default=b"")
    subscriptions = models.JSONField(default=list)
    encoding = models.CharField(max_length=8, default="json")
    created_at = models.DateTimeField(default=_now)
    last_seen_at = models.DateTimeField(default=_now, db_index=True)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"connection {self.id} to {self.actor_id}"


class ActorEvent(models.Model):
    """One broadcast, kept in the bounded per-actor replay log."""

    id = models.BigAutoField(primary_key=True)
    actor = models.ForeignKey(
        Actor, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    seq = models.PositiveBigIntegerField()
    name = models.CharField(max_length=255)
    args = models.BinaryField()
    created_at = models.DateTimeField(default=_now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["actor", "seq"], name="rivet_actorevent_unique_seq"
            ),
        ]
        ordering = ["actor", "seq"]

    def __str__(self) -> str:
        return f"event {self.seq} {self.name} of {self.actor_id}"


# -- scheduling: one-shot schedules, cron jobs and their history, actor queues --
# The database is the source of truth for everything time-based; Celery tasks
# and the sweeper only make it prompt. A firer claims a row (status "running"
# plus a fresh claim token, committed on its own), then runs the actor code in
# the actor's transaction, which consumes the claim only if the token still
# matches. So duplicate deliveries and concurrent sweepers never double-fire,
# and a raising action records its error without being retried.


class ScheduleStatus(models.TextChoices):
    """Life of a one-shot schedule."""

    PENDING = "pending"
    RUNNING = "running"  # claimed by a firer; the action has not committed
    DONE = "done"
    ERROR = "error"


class ScheduleQuerySet(models.QuerySet):
    """Intent-named filters over schedules."""

    def active(self) -> ScheduleQuerySet:
        """Schedules that have not fired yet (pending or claimed)."""
        return self.filter(status__in=[ScheduleStatus.PENDING, ScheduleStatus.RUNNING])

    def due(self, now: Any) -> ScheduleQuerySet:
        """Pending schedules whose time has come."""
        return self.filter(status=ScheduleStatus.PENDING, run_at__lte=now)

    def stale_claims(self, claimed_before: Any) -> ScheduleQuerySet:
        """Claims whose firer vanished (crashed before committing)."""
        return self.filter(status=ScheduleStatus.RUNNING, claimed_at__lt=claimed_before)

    def finished_before(self, when: Any) -> ScheduleQuerySet:
        """Fired schedules kept for inspection, older than ``when``."""
        return self.filter(
            status__in=[ScheduleStatus.DONE, ScheduleStatus.ERROR],
            finished_at__lt=when,
        )


class Schedule(models.Model):
    """A one-shot call of an actor's action at ``run_at`` (``ctx.schedule``)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    actor = models.ForeignKey(
        Actor, on_delete=models.CASCADE, related_name="schedules", db_index=False
    )
    action = models.CharField(max_length=255)
    args = models.BinaryField(default=b"")  # CBOR list
    run_at = models.DateTimeField()
    status = models.CharField(
        max_length=16, choices=ScheduleStatus.choices, default=ScheduleStatus.PENDING
    )
    claim_token = models.UUIDField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    # True once a Celery ETA task was sent for it (only near-term schedules
    # get one; the sweeper sends the rest as their time approaches).
    enqueued = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=_now)
    fired_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    objects = ScheduleQuerySet.as_manager()

    class Meta:
        ordering = ["run_at"]
        indexes = [
            models.Index(
                fields=["run_at"],
                condition=models.Q(status="pending"),
                name="rivet_schedule_pending_run_at",
            ),
            models.Index(fields=["actor", "status"], name="rivet_schedule_actor"),
            models.Index(
                fields=["claimed_at"],
                condition=models.Q(status="running"),
                name="rivet_schedule_claimed",
            ),
            models.Index(
                fields=["finished_at"],
                condition=models.Q(status__in=["done", "error"]),
                name="rivet_schedule_finished",
            ),
        ]

    def __str__(self) -> str:
        when = f"{self.run_at:%Y-%m-%d %H:%M:%S}"
        return f"schedule {self.action} at {when} ({self.status})"

    def decoded_args(self) -> list[Any]:
        """Return the action's arguments."""
        data = bytes(self.args)
        return cbor_loads(data) if data else []


class CronKind(models.TextChoices):
    """How a recurring job computes its next time."""

    CRON = "cron"  # a cron expression in a time zone
    EVERY = "every"  # a fixed interval, anchored (no drift)


class CronJobQuerySet(models.QuerySet):
    """Intent-named filters over cron jobs."""

    def due(self, now: Any) -> CronJobQuerySet:
        """Jobs whose next run time has come (running or not)."""
        return self.filter(next_run_at__lte=now)

    def stale_claims(self, claimed_before: Any) -> CronJobQuerySet:
        """Runs whose firer vanished before committing."""
        return self.filter(running=True, claimed_at__lt=claimed_before)


class CronJob(models.Model):
    """A named recurring call of an actor's action (``ctx.cron``)."""

    id = models.BigAutoField(primary_key=True)
    actor = models.ForeignKey(
        Actor, on_delete=models.CASCADE, related_name="cron_jobs", db_index=False
    )
    name = models.CharField(max_length=128)
    kind = models.CharField(max_length=8, choices=CronKind.choices)
    expression = models.CharField(max_length=255, blank=True, default="")
    interval = models.FloatField(null=True, blank=True)  # seconds, for "every"
    timezone = models.CharField(max_length=64, default="UTC")
    action = models.CharField(max_length=255)
    args = models.BinaryField(default=b"")  # CBOR list
    max_history = models.PositiveIntegerField(default=100)
    next_run_at = models.DateTimeField()
    # A run is claimed and has not committed; a run falling due meanwhile is
    # skipped (overlap).
    running = models.BooleanField(default=False)
    running_for = models.DateTimeField(null=True, blank=True)  # its scheduled time
    claim_token = models.UUIDField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    # The next_run_at a Celery ETA task was sent for.
    enqueued_for = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=_now)
    updated_at = models.DateTimeField(default=_now)

    objects = CronJobQuerySet.as_manager()

    class Meta:
        verbose_name = "cron job"
        ordering = ["actor", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["actor", "name"], name="rivet_cronjob_unique_name"
            ),
        ]
        indexes = [
            models.Index(fields=["next_run_at"], name="rivet_cronjob_next_run"),
            models.Index(
                fields=["claimed_at"],
                condition=models.Q(running=True),
                name="rivet_cronjob_claimed",
            ),
        ]

    def __str__(self) -> str:
        rule = self.expression if self.kind == CronKind.CRON else f"{self.interval}s"
        return f"cron {self.name} ({rule}) of {self.actor_id}"

    def decoded_args(self) -> list[Any]:
        """Return the action's arguments."""
        data = bytes(self.args)
        return cbor_loads(data) if data else []


class CronRunResult(models.TextChoices):
    """Outcome of one cron run."""

    OK = "ok"
    ERROR = "error"
    SKIPPED = "skipped"


class CronRun(models.Model):
    """One history entry of a cron job, trimmed to the job's ``max_history``."""

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(
        CronJob, on_delete=models.CASCADE, related_name="runs", db_index=False
    )
    action = models.CharField(max_length=255)
    scheduled_at = models.DateTimeField()
    fired_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    result = models.CharField(max_length=8, choices=CronRunResult.choices)
    error = models.TextField(blank=True, default="")

    class Meta:
        verbose_name = "cron run"
        ordering = ["-id"]
        indexes = [models.Index(fields=["job", "id"], name="rivet_cronrun_job")]

    def __str__(self) -> str:
        return f"{self.action} at {self.scheduled_at:%Y-%m-%d %H:%M:%S}: {self.result}"

    def as_entry(self) -> dict[str, Any]:
        """Return the history entry of SPEC 3.6."""
        return {
            "action": self.action,
            "scheduled_at": self.scheduled_at,
            "fired_at": self.fired_at,
            "finished_at": self.finished_at,
            "result": self.result,
            "error": self.error or None,
        }


class QueueMessageStatus(models.TextChoices):
    """Life of a queue message."""

    PENDING = "pending"
    RUNNING = "running"  # claimed by a deliverer; the handler has not committed
    DONE = "done"
    FAILED = "failed"


class QueueMessageQuerySet(models.QuerySet):
    """Intent-named filters over queue messages."""

    def active(self) -> QueueMessageQuerySet:
        """Messages not processed yet (pending or claimed)."""
        return self.filter(
            status__in=[QueueMessageStatus.PENDING, QueueMessageStatus.RUNNING]
        )

    def pending(self) -> QueueMessageQuerySet:
        """Messages waiting for their handler."""
        return self.filter(status=QueueMessageStatus.PENDING)

    def stale_claims(self, claimed_before: Any) -> QueueMessageQuerySet:
        """Claims whose deliverer vanished before committing."""
        return self.filter(
            status=QueueMessageStatus.RUNNING, claimed_at__lt=claimed_before
        )

    def finished_before(self, when: Any) -> QueueMessageQuerySet:
        """Processed messages kept for waiting senders, older than ``when``."""
        return self.filter(
            status__in=[QueueMessageStatus.DONE, QueueMessageStatus.FAILED],
            finished_at__lt=when,
        )


class QueueMessage(models.Model):
    """A message in an actor's queue; ``id`` order is FIFO order per actor."""

    id = models.BigAutoField(primary_key=True)
    actor = models.ForeignKey(
        Actor, on_delete=models.CASCADE, related_name="queue_messages", db_index=False
    )
    queue = models.CharField(max_length=128)
    body = models.BinaryField()  # CBOR
    status = models.CharField(
        max_length=16,
        choices=QueueMessageStatus.choices,
        default=QueueMessageStatus.PENDING,
    )
    claim_token = models.UUIDField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    response = models.BinaryField(null=True, blank=True)  # CBOR handler result
    error = models.JSONField(null=True, blank=True)  # {group, code, message, ...}
    created_at = models.DateTimeField(default=_now)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = QueueMessageQuerySet.as_manager()

    class Meta:
        verbose_name = "queue message"
        ordering = ["id"]
        indexes = [
            models.Index(
                fields=["actor", "id"],
                condition=models.Q(status__in=["pending", "running"]),
                name="rivet_queuemsg_active",
            ),
            models.Index(
                fields=["created_at"],
                condition=models.Q(status="pending"),
                name="rivet_queuemsg_pending",
            ),
            models.Index(
                fields=["finished_at"],
                condition=models.Q(status__in=["done", "failed"]),
                name="rivet_queuemsg_finished",
            ),
        ]

    def __str__(self) -> str:
        return f"message {self.id} to {self.queue} of {self.actor_id} ({self.status})"

    def decoded_body(self) -> Any:
        """Return the message body."""
        return cbor_loads(bytes(self.body))

    def decoded_response(self) -> Any:
        """Return the handler's reply (``None`` until processed)."""
        data = bytes(self.response) if self.response is not None else b""
        return cbor_loads(data) if data else None


# -- workflows: the durable workflow runtime (SPEC 5.2-5.4) --------------------------
# The engine's history lives in WorkflowKV (its private KV namespace); the
# Workflow row is the runtime's index over it: status, when to run next, and
# the lease that keeps two workers from running one workflow at once. A run
# claims the lease with a conditional update, every write it makes re-checks
# the lease in the same transaction (fencing), and the release records where
# the workflow paused. A crashed worker's lease expires and the sweeper hands
# the workflow to another worker, which resumes it by replay.


class WorkflowStatus(models.TextChoices):
    """Where a workflow stands (the engine's state, mirrored)."""

    PENDING = "pending"  # started, never run yet
    RUNNING = "running"  # a worker holds its lease (or held it and crashed)
    SLEEPING = "sleeping"  # paused: a sleep, a retry backoff or a message wait
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ROLLING_BACK = "rolling_back", "rolling back"


# Workflows that may still run; the others are finished for good (unless
# recovered or replayed from the admin or a handle).
WORKFLOW_ACTIVE = [
    WorkflowStatus.PENDING,
    WorkflowStatus.RUNNING,
    WorkflowStatus.SLEEPING,
    WorkflowStatus.ROLLING_BACK,
]
WORKFLOW_FINISHED = [
    WorkflowStatus.COMPLETED,
    WorkflowStatus.FAILED,
    WorkflowStatus.CANCELLED,
]


class WorkflowQuerySet(models.QuerySet):
    """Intent-named filters over workflows."""

    def active(self) -> WorkflowQuerySet:
        """Workflows that have not finished."""
        return self.filter(status__in=WORKFLOW_ACTIVE)

    def finished(self) -> WorkflowQuerySet:
        """Completed, failed and cancelled workflows."""
        return self.filter(status__in=WORKFLOW_FINISHED)

    def due(self, now: Any) -> WorkflowQuerySet:
        """Unleased active workflows whose wake-up time has come."""
        return self.filter(status__in=WORKFLOW_ACTIVE, lease_token="", wake_at__lte=now)

    def expired_leases(self, now: Any) -> WorkflowQuerySet:
        """Workflows whose runner stopped renewing its lease (it crashed)."""
        return self.exclude(lease_token="").filter(lease_expires_at__lt=now)

    def runnable(self, now: Any) -> WorkflowQuerySet:
        """Workflows a worker may claim now: due ones and expired leases."""
        return self.due(now) | self.expired_leases(now).filter(
            status__in=WORKFLOW_ACTIVE
        )


class Workflow(models.Model):
    """One workflow instance (``workflows.start``), indexed for the runtime."""

    id = models.CharField(max_length=255, primary_key=True)
    name = models.CharField(max_length=255)
    status = models.CharField(
        max_length=16, choices=WorkflowStatus.choices, default=WorkflowStatus.PENDING
    )
    created_at = models.DateTimeField(default=_now)
    updated_at = models.DateTimeField(default=_now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # When to run next; None while waiting for a message only (or finished).
    wake_at = models.DateTimeField(null=True, blank=True)
    # Message names the workflow waits for ("*" = any), for send() to wake it.
    waiting_for = models.JSONField(default=list, blank=True)
    # Bumped by send()/wake(): a release that sees it changed since its claim
    # runs the workflow again at once (nothing that arrives mid-run is lost).
    wake_signal = models.PositiveBigIntegerField(default=0)
    # handle.cancel() on a running workflow: its runner is fenced out at its
    # next write and the next claim cancels it.
    cancel_requested = models.BooleanField(default=False)
    # The lease: a fresh token per claim; "" when nobody holds it.
    lease_token = models.CharField(max_length=32, blank=True, default="")
    lease_owner = models.CharField(max_length=255, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    run_count = models.PositiveIntegerField(default=0)
    # Consecutive runs that ended on an infrastructure error (storage outage,
    # unknown workflow name, failing rollback handler); drives the backoff.
    retry_count = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    # The wake_at a Celery task was sent for, and when (the sweeper re-sends
    # tasks that look lost).
    enqueued_for = models.DateTimeField(null=True, blank=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)

    objects = WorkflowQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["wake_at"],
                condition=models.Q(status__in=WORKFLOW_ACTIVE, lease_token=""),
                name="rivet_workflow_due",
            ),
            models.Index(
                fields=["lease_expires_at"],
                condition=~models.Q(lease_token=""),
                name="rivet_workflow_leased",
            ),
            models.Index(fields=["name", "status"], name="rivet_workflow_name"),
            models.Index(fields=["status", "created_at"], name="rivet_workflow_status"),
        ]

    def __str__(self) -> str:
        return f"workflow {self.id} ({self.name}, {self.status})"

    @property
    def is_finished(self) -> bool:
        """Tell whether the workflow completed, failed or was cancelled."""
        return self.status in WORKFLOW_FINISHED


class WorkflowKV(models.Model):
    """One key of a workflow's private KV namespace (the engine's history)."""

    id = models.BigAutoField(primary_key=True)
    workflow = models.ForeignKey(
        Workflow, on_delete=models.CASCADE, related_name="kv_entries", db_index=False
    )
    key = models.BinaryField()
    value = models.BinaryField()

    class Meta:
        verbose_name = "workflow KV entry"
        verbose_name_plural = "workflow KV entries"
        constraints = [
            # Also the index that serves ordered prefix and range scans.
            models.UniqueConstraint(
                fields=["workflow", "key"], name="rivet_workflowkv_unique_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_id}:{bytes(self.key)!r}"


class WorkflowMessage(models.Model):
    """A message sent to a workflow (``handle.send``); ``id`` order is FIFO."""

    id = models.BigAutoField(primary_key=True)
    workflow = models.ForeignKey(
        Workflow, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    name = models.CharField(max_length=255)
    body = models.BinaryField()  # CBOR, the workflow schema's encoding
    created_at = models.DateTimeField(default=_now)

    class Meta:
        verbose_name = "workflow message"
        ordering = ["id"]
        indexes = [
            models.Index(fields=["workflow", "id"], name="rivet_wfmessage_inbox"),
        ]

    def __str__(self) -> str:
        return f"message {self.id} {self.name} to {self.workflow_id}"

    def decoded_body(self) -> Any:
        """Return the message body."""
        from .workflow import schema

        return schema.loads(bytes(self.body))
