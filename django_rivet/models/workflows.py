"""Storage of the workflow runtime: the workflow index, its KV and its inbox."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models.lookups import Lookup

from ..engine import schema
from . import base, sql

# -- workflows: the durable runtime (docs/workflows.md, docs/storage-format.md) -----
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
    QUEUED = "queued"  # waiting in its queue (WORKFLOW_QUEUES) to be started
    RUNNING = "running"  # a worker holds its lease (or held it and crashed)
    SLEEPING = "sleeping"  # paused: a sleep, a retry backoff or a message wait
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ROLLING_BACK = "rolling_back", "rolling back"


# Workflows that may still run; the others are finished for good (unless
# recovered or replayed from the admin or a handle).
WORKFLOW_ACTIVE = [
    WorkflowStatus.QUEUED,
    WorkflowStatus.PENDING,
    WorkflowStatus.RUNNING,
    WorkflowStatus.SLEEPING,
    WorkflowStatus.ROLLING_BACK,
]
# Started and not finished: what counts against a queue's concurrency.
WORKFLOW_ADMITTED = [
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
# Rows a worker still has work on: the active ones, and cancelled ones whose
# cancel is still to be carried out (``cancel_requested``: the rollbacks of
# a workflow cancelled while a worker held it, or a rollback to retry).
UNSETTLED = models.Q(status__in=WORKFLOW_ACTIVE) | models.Q(cancel_requested=True)


class WorkflowQuerySet(models.QuerySet["Workflow"]):
    """Intent-named filters over workflows."""

    def active(self) -> WorkflowQuerySet:
        """Workflows that have not finished."""
        return self.filter(status__in=WORKFLOW_ACTIVE)

    def finished(self) -> WorkflowQuerySet:
        """Completed, failed and cancelled workflows."""
        return self.filter(status__in=WORKFLOW_FINISHED)

    def unsettled(self) -> WorkflowQuerySet:
        """Workflows a worker still has work on (:data:`UNSETTLED`)."""
        return self.filter(UNSETTLED)

    def due(self, now: Any) -> WorkflowQuerySet:
        """Unleased unsettled workflows whose wake-up time has come."""
        return self.filter(UNSETTLED, lease_token="", wake_at__lte=now)

    def expired_leases(self, now: Any) -> WorkflowQuerySet:
        """Workflows whose runner stopped renewing its lease (it crashed)."""
        return self.exclude(lease_token="").filter(lease_expires_at__lt=now)

    def finished_before(self, when: Any) -> WorkflowQuerySet:
        """Finished workflows nobody holds, that finished before ``when``.

        What retention may delete: never an active workflow, nor one whose
        lease an operation (recover, replay) holds.
        """
        return self.filter(
            status__in=WORKFLOW_FINISHED,
            finished_at__lt=when,
            lease_token="",
            cancel_requested=False,
        )

    def runnable(self, now: Any) -> WorkflowQuerySet:
        """Workflows a worker may claim now: due ones and expired leases."""
        return self.due(now) | self.expired_leases(now).filter(UNSETTLED)

    def waiting_for_name(self, name: str) -> WorkflowQuerySet:
        """Workflows whose current wait includes ``name`` (``"*"``: any message)."""
        return self.filter(waiting_for__has_name=name)

    def children_of(self, parent_id: str) -> WorkflowQuerySet:
        """The workflows ``parent_id`` started (``ctx.child``/``ctx.start_child``)."""
        return self.filter(parent_id=parent_id)


if TYPE_CHECKING:
    # Lookup is generic only in django-stubs, not at run time.
    _Lookup = Lookup[Any]
else:
    _Lookup = Lookup


class HasName(_Lookup):
    """``waiting_for__has_name="approve"``: the JSON list contains the name.

    Django's ``contains`` on a JSONField is not available on SQLite, so this
    speaks each database's JSON (:meth:`.sql.Dialect.json_list_contains`).
    """

    lookup_name = "has_name"
    prepare_rhs = False

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        return sql.dialect(connection).json_list_contains(lhs, lhs_params, self.rhs)


class Workflow(models.Model):
    """One workflow instance (``workflows.start``), indexed for the runtime."""

    id = models.CharField(max_length=255, primary_key=True)
    name = models.CharField(max_length=255)
    status = models.CharField(
        max_length=16, choices=WorkflowStatus.choices, default=WorkflowStatus.PENDING
    )
    created_at = models.DateTimeField(default=base.now)
    updated_at = models.DateTimeField(default=base.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # When to run next; None while waiting for a message only (or finished).
    wake_at = models.DateTimeField(null=True, blank=True)
    # Message names the workflow waits for ("*" = any), for send() to wake it.
    waiting_for = models.JSONField(default=list, blank=True)
    # Bumped by send()/wake(): a release that sees it changed since its claim
    # runs the workflow again at once (nothing that arrives mid-run is lost).
    wake_signal = models.PositiveBigIntegerField(default=0)
    # A cancel still to be carried out: handle.cancel() marks the workflow
    # cancelled at once and sets this; the runner holding it is fenced out
    # before its next step or write, and the run that carries the cancel
    # out (its rollbacks) clears it.
    cancel_requested = models.BooleanField(default=False)
    # The lease: a fresh token per claim; "" when nobody holds it.
    lease_token = models.CharField(max_length=32, blank=True, default="")
    lease_owner = models.CharField(max_length=255, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Whether the history is as a run's release left it (the history cache,
    # workflows/history_cache.py): that run's token; "c:" + it once claimed.
    history_mark = models.CharField(max_length=40, blank=True, default="")
    # A child's parent ("" for a top-level workflow), and whether it outlives
    # a cancel of its parent (``start_child(detached=True)``).
    parent_id = models.CharField(max_length=255, blank=True, default="")
    detached = models.BooleanField(default=False)
    # Workflows other than its parent that wait for it (a ``ctx.child`` that
    # named its id while it existed): each is woken when it ends.
    awaited_by = models.JSONField(default=list, blank=True)
    # When the workflow is cancelled with reason "timeout" (``timeout=``).
    deadline_at = models.DateTimeField(null=True, blank=True)
    # Why it was (or is being) cancelled: cancelled, parent_cancelled, timeout.
    cancel_reason = models.CharField(max_length=32, blank=True, default="")
    run_count = models.PositiveIntegerField(default=0)
    # Consecutive runs that ended on an infrastructure error (storage outage,
    # unknown workflow name, failing rollback handler); drives the backoff.
    retry_count = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    # The wake_at a Celery task was sent for, and when (the sweeper re-sends
    # tasks that look lost).
    enqueued_for = models.DateTimeField(null=True, blank=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    # Workflow queues (WORKFLOW_QUEUES): "" for a workflow started directly.
    # A queued one waits with status "queued" (and no wake_at) until
    # admission starts it, lowest priority first, then oldest; started_at
    # is when that happened (the rate limit counts them). A dedup_key ("":
    # none) is unique among the queue's workflows that have not finished.
    queue = models.CharField(max_length=128, blank=True, default="")
    # Its partition of a partitioned queue ("": the queue is not partitioned).
    partition_key = models.CharField(max_length=255, blank=True, default="")
    priority = models.IntegerField(default=0)
    dedup_key = models.CharField(max_length=255, blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    # A delayed start (``workflows.start(..., run_after=...)``) of a queued
    # workflow: admission passes it over until then (a direct start waits
    # in ``wake_at`` instead).
    run_after = models.DateTimeField(null=True, blank=True)
    # The W3C traceparent of the span that started it ("" without tracing):
    # every run's span continues that trace (docs/observability.md).
    traceparent = models.CharField(max_length=55, blank=True, default="")
    # The application version it runs on (RIVET["APP_VERSION"] when it was
    # started, or ``start(..., version=)``; "": none). A worker with a
    # version runs only runs of its own version and unversioned ones; the
    # others wait for a worker that has theirs (docs/workflows.md).
    version = models.CharField(max_length=64, blank=True, default="")
    # A debounced start (``start(..., debounce=)``) waiting for its burst to
    # end: queued with ``run_after``, which each start of its dedup_key
    # pushes back (never past ``debounce_deadline``, from ``debounce_max``).
    # Admission clears its dedup_key: a later start begins a new burst.
    debounced = models.BooleanField(default=False)
    debounce_deadline = models.DateTimeField(null=True, blank=True)

    objects = WorkflowQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["wake_at"],
                condition=UNSETTLED & models.Q(lease_token=""),
                name="rivet_workflow_due",
            ),
            models.Index(
                fields=["lease_expires_at"],
                condition=~models.Q(lease_token=""),
                name="rivet_workflow_leased",
            ),
            models.Index(fields=["name", "status"], name="rivet_workflow_name"),
            models.Index(fields=["status", "created_at"], name="rivet_workflow_status"),
            # Serves the retention purge (oldest finished first).
            models.Index(
                fields=["finished_at"],
                condition=models.Q(status__in=WORKFLOW_FINISHED),
                name="rivet_workflow_finished",
            ),
            # Workflow queues: the next to admit, the running count, the
            # starts within the rate window.
            models.Index(
                fields=["queue", "priority", "created_at"],
                condition=models.Q(status="queued"),
                name="rivet_workflow_queued",
            ),
            # A partitioned queue's next to admit, partition by partition.
            models.Index(
                fields=["queue", "partition_key", "priority", "created_at"],
                condition=models.Q(status="queued") & ~models.Q(partition_key=""),
                name="rivet_workflow_partition",
            ),
            models.Index(
                fields=["queue", "status"],
                condition=~models.Q(queue=""),
                name="rivet_workflow_queue_status",
            ),
            models.Index(
                fields=["queue", "started_at"],
                condition=~models.Q(queue=""),
                name="rivet_workflow_queue_started",
            ),
            # workflows.filter() without a status: newest first.
            models.Index(fields=["created_at"], name="rivet_workflow_created"),
            # A parent's children (cancel cascade, filter(parent_id=...)).
            models.Index(
                fields=["parent_id", "status"],
                condition=~models.Q(parent_id=""),
                name="rivet_workflow_children",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "dedup_key"],
                condition=(
                    ~models.Q(dedup_key="") & models.Q(status__in=WORKFLOW_ACTIVE)
                ),
                name="rivet_workflow_dedup",
            ),
        ]

    def __str__(self) -> str:
        return f"workflow {self.id} ({self.name}, {self.status})"

    @property
    def is_finished(self) -> bool:
        """Tell whether the workflow completed, failed or was cancelled."""
        return self.status in WORKFLOW_FINISHED


Workflow._meta.get_field("waiting_for").register_lookup(HasName)


#: The workflow every task of Django's Tasks framework runs as
#: (``django_rivet.task_backend``).
TASK_WORKFLOW = "rivet.task"


class DjangoTaskManager(models.Manager["DjangoTask"]):
    """Only the workflows that run tasks."""

    def get_queryset(self) -> models.QuerySet[DjangoTask]:
        return super().get_queryset().filter(name=TASK_WORKFLOW)


class DjangoTask(Workflow):
    """A task of Django's Tasks framework: the workflow it runs as (admin)."""

    objects = DjangoTaskManager()  # type: ignore[misc,assignment]

    class Meta:
        proxy = True
        verbose_name = "Django task"

    def __str__(self) -> str:
        return f"task {self.id} ({self.status})"


class WorkflowKV(base.KVRow):
    """One key of a workflow's private KV namespace (the engine's history)."""

    owner_field = "workflow"
    workflow = models.ForeignKey(
        Workflow, on_delete=models.CASCADE, related_name="kv_entries", db_index=False
    )

    class Meta:
        verbose_name = "workflow KV entry"
        verbose_name_plural = "workflow KV entries"
        constraints = [
            # Also the index that serves ordered prefix and range scans.
            models.UniqueConstraint(
                fields=["workflow", "key"], name="rivet_workflowkv_unique_key"
            ),
        ]


class WorkflowAttribute(models.Model):
    """A searchable attribute of a workflow (``start(..., attributes=...)``).

    A string or an integer; integers are stored as their decimal text with
    ``number`` set, so ``{"tier": 3}`` and ``{"tier": "3"}`` stay distinct.
    Indexed by key and value: ``filter(attributes={...})`` is equality only.
    """

    id = models.BigAutoField(primary_key=True)
    workflow = models.ForeignKey(
        Workflow, on_delete=models.CASCADE, related_name="attributes", db_index=False
    )
    key = models.CharField(max_length=64)
    value = models.CharField(max_length=255)
    number = models.BooleanField(default=False)

    class Meta:
        verbose_name = "workflow attribute"
        constraints = [
            models.UniqueConstraint(
                fields=["workflow", "key"], name="rivet_wfattribute_unique_key"
            ),
        ]
        indexes = [
            models.Index(fields=["key", "value"], name="rivet_wfattribute_lookup"),
        ]

    def __str__(self) -> str:
        return f"{self.key}={self.value} of {self.workflow_id}"

    @property
    def typed_value(self) -> str | int:
        """Return the value as it was given: an integer or a string."""
        return int(self.value) if self.number else self.value


class WorkflowMessageKey(models.Model):
    """An idempotency key a message to a workflow was sent with.

    Kept after the message is received (``handle.send(...,
    idempotency_key=k)`` delivers at most once per key and workflow), and
    deleted with the workflow.
    """

    id = models.BigAutoField(primary_key=True)
    workflow = models.ForeignKey(
        Workflow, on_delete=models.CASCADE, related_name="message_keys", db_index=False
    )
    key = models.CharField(max_length=255)
    # The message it sent (the inbox row is gone once it was received).
    message_id = models.BigIntegerField()

    class Meta:
        verbose_name = "workflow message key"
        constraints = [
            models.UniqueConstraint(
                fields=["workflow", "key"], name="rivet_wfmessagekey_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} to {self.workflow_id}"


class WorkflowMessage(models.Model):
    """A message sent to a workflow (``handle.send``); ``id`` order is FIFO."""

    id = models.BigAutoField(primary_key=True)
    workflow = models.ForeignKey(
        Workflow, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    name = models.CharField(max_length=255)
    body = models.BinaryField()  # CBOR, the workflow schema's encoding
    created_at = models.DateTimeField(default=base.now)

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
        return schema.loads(bytes(self.body))


# -- workflow streams (ctx.write_stream; docs/workflows.md, "Streams") ---------------
# Rows of their own, not keys of the history: offsets are assigned here, at
# commit, so writes from the body and from steps share one sequence; readers
# ask for "offset > N" on an index; the engine never loads them back; and
# the admin and the purge count and delete them with plain queries.


class WorkflowStream(models.Model):
    """One stream of a workflow: how many values it holds, whether it is closed."""

    id = models.BigAutoField(primary_key=True)
    workflow = models.ForeignKey(
        Workflow, on_delete=models.CASCADE, related_name="streams", db_index=False
    )
    key = models.CharField(max_length=255)
    # The offset of the last value (values are numbered 1, 2, 3...).
    length = models.PositiveBigIntegerField(default=0)
    closed = models.BooleanField(default=False)
    updated_at = models.DateTimeField(default=base.now)

    class Meta:
        verbose_name = "workflow stream"
        constraints = [
            models.UniqueConstraint(
                fields=["workflow", "key"], name="rivet_wfstream_key"
            ),
        ]

    def __str__(self) -> str:
        return f"stream {self.key!r} of {self.workflow_id} ({self.length} values)"


class WorkflowStreamValue(models.Model):
    """One value of a stream, at its offset (CBOR)."""

    id = models.BigAutoField(primary_key=True)
    stream = models.ForeignKey(
        WorkflowStream, on_delete=models.CASCADE, related_name="values", db_index=False
    )
    offset = models.PositiveBigIntegerField()
    value = models.BinaryField()
    # A write from the workflow body names its place in the code: a replay
    # writing it again is recognised ("": written inside a step).
    source = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        verbose_name = "workflow stream value"
        constraints = [
            # Also the index of "the values after offset N".
            models.UniqueConstraint(
                fields=["stream", "offset"], name="rivet_wfstreamvalue_offset"
            ),
            models.UniqueConstraint(
                fields=["stream", "source"],
                condition=~models.Q(source=""),
                name="rivet_wfstreamvalue_source",
            ),
        ]

    def __str__(self) -> str:
        return f"value {self.offset} of stream {self.stream_id}"

    def decoded_value(self) -> Any:
        """Return the value."""
        return schema.loads(bytes(self.value))
