"""Storage of scheduling: one-shot schedules, cron jobs and their runs, queues."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models

from ..encoding import cbor_loads
from . import base
from .actors import Actor

# -- scheduling: one-shot schedules, cron jobs and their history, actor queues --
# The database is the source of truth for everything time-based; Celery tasks
# and the sweeper only make it prompt. A firer claims a row (status "running"
# plus a fresh claim token, committed on its own), then runs the actor code in
# the actor's transaction, which consumes the claim only if the token still
# matches. So duplicate deliveries and concurrent sweepers never double-fire.
# A raising action records its error (fenced by the same token) and, while
# it has retries left, goes back to pending with a later time.


class ScheduleStatus(models.TextChoices):
    """Life of a one-shot schedule."""

    PENDING = "pending"
    RUNNING = "running"  # claimed by a firer; the action has not committed
    DONE = "done"
    FAILED = "failed"  # every attempt failed (or a UserError); kept until retention


class ScheduleQuerySet(models.QuerySet["Schedule"]):
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
            status__in=[ScheduleStatus.DONE, ScheduleStatus.FAILED],
            finished_at__lt=when,
        )

    def failed(self) -> ScheduleQuerySet:
        """Schedules whose attempts all failed (what "retry" applies to)."""
        return self.filter(status=ScheduleStatus.FAILED)


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
    created_at = models.DateTimeField(default=base.now)
    fired_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Retries after the first attempt; None follows SCHEDULE_MAX_RETRIES.
    max_retries = models.PositiveSmallIntegerField(null=True, blank=True)
    # Attempts claimed so far (a claim counts one, so a crashing firer counts).
    attempts = models.PositiveIntegerField(default=0)
    # The last attempt's error ("Type: message") and traceback.
    error = models.TextField(blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    # The W3C traceparent of the span that created it ("" without tracing):
    # the firing's span continues that trace (docs/observability.md).
    traceparent = models.CharField(max_length=55, blank=True, default="")

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
                condition=models.Q(status__in=["done", "failed"]),
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


class CronJobQuerySet(models.QuerySet["CronJob"]):
    """Intent-named filters over cron jobs."""

    def due(self, now: Any) -> CronJobQuerySet:
        """Jobs whose next run, or a failed run's retry, is due (running or not)."""
        return self.filter(models.Q(next_run_at__lte=now) | models.Q(retry_at__lte=now))

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
    # History entries kept; None follows RIVET["CRON_HISTORY"].
    max_history = models.PositiveIntegerField(null=True, blank=True)
    next_run_at = models.DateTimeField()
    # A run is claimed and has not committed; a run falling due meanwhile is
    # skipped (overlap).
    running = models.BooleanField(default=False)
    running_for = models.DateTimeField(null=True, blank=True)  # its scheduled time
    claim_token = models.UUIDField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    # The next_run_at a Celery ETA task was sent for.
    enqueued_for = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=base.now)
    updated_at = models.DateTimeField(default=base.now)
    # Retries of a failed run; None follows SCHEDULE_MAX_RETRIES.
    max_retries = models.PositiveSmallIntegerField(null=True, blank=True)
    # A failed run waiting for its retry: when, and the run's scheduled time.
    # Always before next_run_at: a retry that would not be is given up.
    retry_at = models.DateTimeField(null=True, blank=True)
    retry_for = models.DateTimeField(null=True, blank=True)
    # Attempts of the run in progress or waiting for its retry.
    attempts = models.PositiveIntegerField(default=0)

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
            models.Index(
                fields=["retry_at"],
                condition=models.Q(retry_at__isnull=False),
                name="rivet_cronjob_retry",
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
    # Attempts the run took (0 for a skipped run); its last traceback.
    attempts = models.PositiveIntegerField(default=0)
    traceback = models.TextField(blank=True, default="")

    class Meta:
        verbose_name = "cron run"
        ordering = ["-id"]
        indexes = [models.Index(fields=["job", "id"], name="rivet_cronrun_job")]

    def __str__(self) -> str:
        return f"{self.action} at {self.scheduled_at:%Y-%m-%d %H:%M:%S}: {self.result}"

    def as_entry(self) -> dict[str, Any]:
        """Return the entry ``ctx.cron.history()`` lists (docs/scheduling.md)."""
        return {
            "action": self.action,
            "scheduled_at": self.scheduled_at,
            "fired_at": self.fired_at,
            "finished_at": self.finished_at,
            "result": self.result,
            "error": self.error or None,
            "attempts": self.attempts,
        }


class QueueMessageStatus(models.TextChoices):
    """Life of a queue message."""

    PENDING = "pending"
    RUNNING = "running"  # claimed by a deliverer; the handler has not committed
    DONE = "done"
    FAILED = "failed"


class QueueMessageQuerySet(models.QuerySet["QueueMessage"]):
    """Intent-named filters over queue messages."""

    def active(self) -> QueueMessageQuerySet:
        """Messages not processed yet (pending or claimed)."""
        return self.filter(
            status__in=[QueueMessageStatus.PENDING, QueueMessageStatus.RUNNING]
        )

    def pending(self) -> QueueMessageQuerySet:
        """Messages waiting for their handler."""
        return self.filter(status=QueueMessageStatus.PENDING)

    def deliverable(self, now: Any) -> QueueMessageQuerySet:
        """Pending messages not waiting for a retry's time."""
        return self.pending().filter(
            models.Q(retry_at__isnull=True) | models.Q(retry_at__lte=now)
        )

    def failed(self) -> QueueMessageQuerySet:
        """Messages whose attempts all failed (what "retry" applies to)."""
        return self.filter(status=QueueMessageStatus.FAILED)

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
    # The last attempt's error: {group, code, message, metadata, detail}.
    error = models.JSONField(null=True, blank=True)
    traceback = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=base.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Attempts claimed so far; a failed attempt with retries left stays at
    # the head of the actor's queue, pending, until retry_at.
    attempts = models.PositiveIntegerField(default=0)
    retry_at = models.DateTimeField(null=True, blank=True)
    # The W3C traceparent of the span that created it ("" without tracing):
    # the firing's span continues that trace (docs/observability.md).
    traceparent = models.CharField(max_length=55, blank=True, default="")

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


# -- workflow queues and workflows on a schedule ---------------------------------------
# Workflow rows carry their queue, priority and deduplication key
# (models.workflows); a WorkflowQueue row exists per queue used so that
# admission can lock it: one admitter per queue at a time, on every database.


class WorkflowQueue(models.Model):
    """The lock admission takes on one workflow queue (``WORKFLOW_QUEUES``)."""

    name = models.CharField(max_length=128, primary_key=True)
    created_at = models.DateTimeField(default=base.now)
    # The last admission pass (each pass writes it: the write is the lock).
    admitted_at = models.DateTimeField(null=True, blank=True)
    # When the rate limit lets the next workflow start, if a wake-up was
    # sent for it (so a burst of starts sends one, not one each).
    enqueued_for = models.DateTimeField(null=True, blank=True)
    # A partitioned queue's round robin: the partition the last pass served
    # last; the next pass starts with the one after it.
    partition_cursor = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        verbose_name = "workflow queue"
        ordering = ["name"]

    def __str__(self) -> str:
        return f"workflow queue {self.name}"


class ScheduledWorkflowQuerySet(models.QuerySet["ScheduledWorkflow"]):
    """Intent-named filters over scheduled workflows."""

    def due(self, now: Any) -> ScheduledWorkflowQuerySet:
        """Schedules not paused whose next tick has come."""
        return self.filter(paused=False, next_tick_at__lte=now)


class ScheduledWorkflow(models.Model):
    """A workflow schedule: one row per schedule name.

    Two kinds share the table and the firing path: the schedules of
    ``@workflow(cron=...)`` (``from_code``; the row's name is the workflow's,
    and the row follows the code: it is written from the registered
    definitions by the first sweep or worker round that sees them), and the
    schedules created at run time with ``workflows.schedules.create`` or
    ``apply`` (several per workflow, each with its ``context`` and
    ``queue``). ``paused`` and the ticks are changed by either.
    """

    name = models.CharField(max_length=200, primary_key=True)
    workflow_name = models.CharField(max_length=200, default="")
    expression = models.CharField(max_length=255)
    timezone = models.CharField(max_length=64, default="UTC")
    # Handed to each tick's workflow as input["context"] (JSON).
    context = models.JSONField(null=True, blank=True)
    # The workflow queue ticks are started on ("": a direct start).
    queue = models.CharField(max_length=200, blank=True, default="")
    # Start every tick missed while nothing ran (else: one late tick).
    catch_up = models.BooleanField(default=False)
    # Written from a @workflow(cron=...) (else: created at run time).
    from_code = models.BooleanField(default=False)
    # The next tick to start: the source of truth, moved forward by
    # compare-and-set in the transaction that starts the tick's workflow.
    next_tick_at = models.DateTimeField()
    paused = models.BooleanField(default=False)
    last_tick_at = models.DateTimeField(null=True, blank=True)
    last_workflow_id = models.CharField(max_length=255, blank=True, default="")
    # The next_tick_at a Celery ETA task was sent for.
    enqueued_for = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=base.now)
    updated_at = models.DateTimeField(default=base.now)

    objects = ScheduledWorkflowQuerySet.as_manager()

    class Meta:
        verbose_name = "scheduled workflow"
        ordering = ["name"]

    def __str__(self) -> str:
        state = "paused" if self.paused else f"next {self.next_tick_at:%Y-%m-%d %H:%M}"
        return f"{self.name} ({self.expression}, {state})"
