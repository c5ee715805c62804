"""The one place where the benchmarks touch django-rivet's private parts.

Everything else in bench/ uses the public API (``django_rivet``,
``.actors``, ``.workflows``, ``.workflow``, ``.testing``) plus
``django_rivet.engine.storage.Storage`` and
``django_rivet.workflows.driver.DjangoDriver``. What is here needs
the names of tables and columns, which no public API gives: when a module
moves, only this file changes.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any


def workflow_kv_table() -> tuple[str, str, str, str]:
    """Return the quoted (table, workflow id, key, value) names of WorkflowKV."""
    from django.db import connection

    from django_rivet.models import WorkflowKV

    quote = connection.ops.quote_name
    fk = WorkflowKV._meta.get_field("workflow").column
    return (
        quote(WorkflowKV._meta.db_table),
        quote(fk),
        quote("key"),
        quote("value"),
    )


def delete_workflow_kv(workflow_id: str) -> None:
    """Delete a workflow's KV rows (between trials, untimed)."""
    from django_rivet.models import WorkflowKV

    WorkflowKV.objects.filter(workflow_id=workflow_id).delete()


def take_lease(workflow_id: str) -> str:
    """Give ``workflow_id`` a lease held by us, as a worker's claim would."""
    from django_rivet import clock
    from django_rivet.models import Workflow

    token = uuid.uuid4().hex
    expires = clock.now_datetime() + timedelta(hours=1)
    Workflow.objects.filter(pk=workflow_id).update(
        lease_token=token, lease_expires_at=expires
    )
    return token


def actor_cache_size() -> int:
    """Return how many actor instances this process holds in its cache."""
    from django_rivet.actors import cache

    return len(cache.cached_ids())


def store_old_states(name: str, keys: list[str], state: bytes, version: int) -> None:
    """Store ``state`` (CBOR) as the ``version`` state of actors ``name``/``keys``.

    P1T: between trials (untimed), what an earlier deploy left behind.
    """
    from django.db import connection

    from django_rivet.models import Actor

    rows = Actor.objects.filter(name=name, key__in=[f'["{k}"]' for k in keys])
    rows.update(state=state, state_version=version)
    if connection.vendor == "sqlite":
        # The untimed writes are checkpointed now, not during the timed calls.
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def add_kv_rows(workflow_id: str, image: dict[bytes, bytes]) -> None:
    """Insert ``image`` into a workflow's KV rows (P6's prepared history).

    One ``executemany`` (a model instance per row cost P6w's 100k-entry
    legs 10-30 s of setup each).
    """
    from django.db import connection, transaction

    table, fk, key, value = workflow_kv_table()
    sql = f"INSERT INTO {table} ({fk}, {key}, {value}) VALUES (%s, %s, %s)"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, [(workflow_id, k, v) for k, v in image.items()])


def run_workflow(workflow_id: str) -> str | None:
    """Run a workflow as a worker does when it is woken (P6w).

    What the ``rivet.run_workflow`` task runs: claim the lease, run while it
    is due, release; ``None`` when nothing ran.
    """
    from django_rivet.workflows import execution

    return execution.run(workflow_id)


def message_and_row_sql() -> tuple[str, str]:
    """Return P6w's baseline statements, raw.

    An ``INSERT`` of one inbox message (params: workflow id, name, body,
    created_at as the database takes it) and a ``SELECT`` of one workflow
    row by its primary key (param: workflow id).
    """
    from django.db import connection

    from django_rivet.models import Workflow, WorkflowMessage

    quote = connection.ops.quote_name
    messages = quote(WorkflowMessage._meta.db_table)
    fk = quote(WorkflowMessage._meta.get_field("workflow").column)
    insert = (
        f"INSERT INTO {messages} ({fk}, {quote('name')}, {quote('body')}, "
        f"{quote('created_at')}) VALUES (%s, %s, %s, %s)"
    )
    select = (
        f"SELECT {quote('status')} FROM {quote(Workflow._meta.db_table)} "
        f"WHERE {quote(Workflow._meta.pk.column)} = %s"
    )
    return insert, select


def wake_statements(workflow_id: str, rows: int = 4) -> Any:
    """Return one wake's statements, raw: P6L's floor (no engine, one thread).

    What a wake must commit and read, in as few round trips as the database
    allows: the send (the workflow row's wake signal and the message's
    insert, one commit), the run's read of its oldest message, and its
    record (``rows`` KV rows and the message's removal, one commit). On
    PostgreSQL each commit is one data-modifying ``WITH`` in autocommit; on
    SQLite a transaction of two statements. The returned callable makes
    one wake.
    """
    import itertools

    from django.db import connection, transaction
    from django.utils import timezone

    from django_rivet.models import Workflow, WorkflowMessage

    quote = connection.ops.quote_name
    workflows = quote(Workflow._meta.db_table)
    messages = quote(WorkflowMessage._meta.db_table)
    kv, fk, key, value = workflow_kv_table()
    signal, id_, owner = quote("wake_signal"), quote("id"), quote("workflow_id")
    bump = f"UPDATE {workflows} SET {signal} = {signal} + 1 WHERE {id_} = %s"
    columns = f"({owner}, {quote('name')}, {quote('body')}, {quote('created_at')})"
    read = (
        f"SELECT {id_}, {quote('name')}, {quote('body')}, {quote('created_at')} "
        f"FROM {messages} WHERE {owner} = %s ORDER BY {id_} LIMIT 1"
    )
    values = ", ".join(["(%s, %s, %s)"] * rows)
    record = f"INSERT INTO {kv} ({fk}, {key}, {value}) VALUES {values}"
    remove = f"DELETE FROM {messages} WHERE {owner} = %s AND {id_} = %s"
    postgresql = connection.vendor == "postgresql"
    counter = itertools.count()

    def wake() -> None:
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        index = next(counter)
        kv_params = [
            item
            for row in range(rows)
            for item in (workflow_id, b"%08d/%d" % (index, row), bytes(60))
        ]
        with connection.cursor() as cursor:
            if postgresql:
                cursor.execute(
                    f"WITH u AS ({bump} RETURNING {id_}) INSERT INTO {messages} "
                    f"{columns} SELECT u.{id_}, %s, %s, %s FROM u",
                    [workflow_id, "m", b"\xf6", now],
                )
            else:
                with transaction.atomic():
                    cursor.execute(bump, [workflow_id])
                    cursor.execute(
                        f"INSERT INTO {messages} {columns} VALUES (%s, %s, %s, %s)",
                        [workflow_id, "m", b"\xf6", now],
                    )
            cursor.execute(read, [workflow_id])
            message = cursor.fetchone()[0]
            if postgresql:
                cursor.execute(
                    f"WITH gone AS ({remove}) {record}",
                    [workflow_id, message, *kv_params],
                )
            else:
                with transaction.atomic():
                    cursor.execute(record, kv_params)
                    cursor.execute(remove, [workflow_id, message])

    return wake


def delete_messages(workflow_id: str) -> None:
    """Delete a workflow's inbox messages (P6w's baseline rows, untimed)."""
    from django_rivet.models import WorkflowMessage

    WorkflowMessage.objects.filter(workflow_id=workflow_id).delete()


def checkpoint_sqlite() -> None:
    """Checkpoint and truncate SQLite's WAL (between trials, untimed).

    So a trial never pays for checkpointing what the previous one wrote or
    deleted. Does nothing on other databases.
    """
    from django.db import connection

    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def start_embedded_worker() -> None:
    """Start the embedded worker in this process (as daphne does on a request)."""
    from django_rivet.upkeep import worker

    worker.start_embedded_worker()


def stop_embedded_worker() -> None:
    from django_rivet.upkeep import worker

    worker.stop_embedded_worker()


def record_stream_commits(times: dict[int, float]) -> None:
    """Record when each offset of stream ``n`` committed (P15), in ``times``.

    Wraps the announcement the driver makes right after each commit.
    """
    import time

    from django_rivet.workflows import streams

    announce = streams.announce

    def recorded(workflow_id: str, appended: Any, ended: bool = False) -> None:
        now = time.time()
        for item in appended:
            for offset in range(item.first, item.length + 1):
                times.setdefault(offset, now)
        announce(workflow_id, appended, ended)

    streams.announce = recorded


def describe() -> dict[str, Any]:
    """Return what this file depends on, for the results' metadata."""
    return {
        "private": [
            "django_rivet.models.WorkflowKV / Workflow (tables, lease columns)",
            "django_rivet.actors.cache.cached_ids (P9 checks the cache)",
            "django_rivet.upkeep.worker.start/stop_embedded_worker (P8)",
            "django_rivet.models.Actor state/state_version columns (P1T)",
            "django_rivet.workflows.streams.announce (P15 times each commit)",
            "django_rivet.workflows.execution.run (P6w: a worker's run on a wake)",
            "django_rivet.models.WorkflowMessage (P6w's raw baseline)",
        ]
    }
