"""P1T: what typed values cost a call, and what a state migration costs.

Row 1. Subject: ``handle.call("add", Item(...))`` -- a dataclass holding a
``Decimal`` and an ``Enum`` in, a dataclass out (docs/types.md): dumped to
the value domain, checked, validated into the annotated type before the
action runs, and the result dumped, checked and validated back for the
caller. Baseline: the same action written untyped (a dict in, a dict out,
the Decimal arithmetic done by hand), same actor, same run. Target: the
issue's <= 1.10x.

Row 2. Subject: a call (``bump``, which changes the state) to an actor
whose stored state is version 1 of a typed state at version 2: the first
load runs ``migrate_state`` before the action, and the state is written
back with its new version. Baseline: the same call to an actor whose state
is current; it writes its state too. Both read their state from the
database (the process cache is emptied before each trial, untimed, and the
migrated states are put back to version 1, the WAL checkpointed).
Reported: the extra microseconds a migration costs the call that does it.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from bench.core import Target, alternate, per_op_us, row_from

ID = "P1T"
TITLE = "typed arguments and result vs untyped; a call that migrates its state"
TARGET = Target("ratio", "<=", 1.10)
REPORT = Target("none")


def leg(trials: int, batch: int) -> dict[str, Any]:
    from bench.benchapp.actors import Color, Item
    from django_rivet import actors

    handle = actors.get_or_create("typedBench", "p1t")
    item = Item("apple", Decimal("0.99"), 3, Color.RED)
    plain = {"sku": "apple", "price": "0.99", "qty": 3, "color": "red"}

    def typed() -> None:
        handle.call("add", item)

    def untyped() -> None:
        handle.call("add_plain", plain)

    return alternate(per_op_us(typed, batch), per_op_us(untyped, batch), trials, 2)


def migration_leg(trials: int, batch: int) -> dict[str, Any]:
    import cbor2

    from bench.internals import store_old_states
    from django_rivet import actors
    from django_rivet.testing import reset_actor_cache

    old = [f"old-{i}" for i in range(batch)]
    current = [f"current-{i}" for i in range(batch)]
    for key in old + current:
        actors.get_or_create("migratingBench", key)
    state = cbor2.dumps({"count": 7})

    def calls(keys: list[str]) -> float:
        reset_actor_cache()  # both arms read their state from the row
        handles = [actors.get("migratingBench", key) for key in keys]
        return per_op_us(lambda: handles.pop().call("bump"), len(keys))()

    def migrating() -> float:
        store_old_states("migratingBench", old, state, 1)
        return calls(list(old))

    def loading() -> float:
        return calls(list(current))

    return alternate(migrating, loading, trials, 1)


def run(ctx: Any) -> list:
    params = ctx.size({"trials": 15, "batch": 200}, {"trials": 1, "batch": 5})
    rows = []
    for db, label in (("sqlite", "SQLite-WAL"), ("postgresql", "PostgreSQL")):
        found = ctx.leg("bench.measures.p01_typed:leg", params, db=db)
        rows.append(
            row_from(ID, f"typed handle.call, {label}", "us", found, "untyped", TARGET)
        )
        found = ctx.leg("bench.measures.p01_typed:migration_leg", params, db=db)
        extra = found["subject"]["median"] - found["baseline"]["median"]
        rows.append(
            row_from(
                ID,
                f"call that migrates its state, {label}",
                "us",
                found,
                "state current",
                REPORT,
                migration_us=round(extra, 1),
            )
        )
    return rows
