"""P1: ``handle.call`` of a state-changing action against the commit floor.

Subject: ``actors.get_or_create("bench", "p1").call("increment")`` -- one
invocation that locks the actor row, runs the action (``state["n"] += 1``)
and writes the state blob, sequentially from one thread.

Baseline, the floor: the least any implementation must do for the same
guarantee, at cursor level (no ORM): one transaction that locks a row
(``SELECT ... FOR UPDATE`` on PostgreSQL; on SQLite the transaction's write
takes the database lock), reads its CBOR state blob, bumps the counter and
writes the blob back. Same database, same connection settings, same run.
"""

from __future__ import annotations

from typing import Any

from bench.core import Target, alternate, per_op_us, row_from

ID = "P1"
TITLE = "handle.call vs the cursor-level lock+write floor"
TARGET = Target("ratio", "<=", 1.5)


def leg(trials: int, batch: int) -> dict[str, Any]:
    import cbor2
    from django.db import connection, transaction

    from bench.benchapp.models import Row
    from django_rivet import actors

    handle = actors.get_or_create("bench", "p1")
    row, _ = Row.objects.get_or_create(
        name="floor", defaults={"state": cbor2.dumps({"n": 0})}
    )
    table = connection.ops.quote_name(Row._meta.db_table)
    select = f"SELECT state FROM {table} WHERE id = %s"
    if connection.vendor == "postgresql":
        select += " FOR UPDATE"
    update = f"UPDATE {table} SET state = %s WHERE id = %s"
    pk = row.pk

    def floor() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(select, [pk])
            state = cbor2.loads(bytes(cursor.fetchone()[0]))
            state["n"] += 1
            cursor.execute(update, [cbor2.dumps(state), pk])

    def call() -> None:
        handle.call("increment")

    return alternate(per_op_us(call, batch), per_op_us(floor, batch), trials, warmup=2)


def run(ctx: Any) -> list:
    params = ctx.size({"trials": 15, "batch": 200}, {"trials": 1, "batch": 5})
    rows = []
    for db, label in (("sqlite", "SQLite-WAL"), ("postgresql", "PostgreSQL")):
        found = ctx.leg("bench.measures.p01_call:leg", params, db=db)
        rows.append(row_from(ID, f"handle.call, {label}", "us", found, "floor", TARGET))
    return rows
