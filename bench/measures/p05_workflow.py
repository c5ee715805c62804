"""P5: one workflow of N trivial steps, against DBOS on the same database kind.

Subject: ``workflows.start("benchSteps", N)`` then
``django_rivet.testing.run_until_idle(handle)`` -- the run a worker does
(claim the lease, run to completion, release), so the time is the engine
plus its database writes: one transaction per step.

Baseline: DBOS 3.4.0 (a bench-only extra) running the same shape -- a
workflow calling N trivial steps in sequence -- in the same process, with
its system database next to ours: another SQLite file in WAL mode, or
another database on the same PostgreSQL server (default durability). Both
sides include starting the workflow.

The commit floor: N single-row durable commits on the same database and
connection (one ``INSERT`` of a 64-byte value per transaction, cursor level)
-- what any design keeping one durable write per step pays at least.

The cancel check (issue 44): the same subject with the read a run makes
before each step (is the workflow cancelled?) switched off
(``DjangoDriver.checks_cancel``), to say what the check costs per step.
Trials rotate rivet, rivet without the check, DBOS and the floor.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

from bench.core import Target, paired, rounds, row_from

ID = "P5"
TITLE = "workflow of trivial steps vs DBOS and the commit floor"
TARGET = Target("ratio", "<=", 0.33)
FLOOR_TARGET = Target("ratio", "<=", 1.5)  # issue 46
CHECK_TARGET = Target("ratio", "<=", 1.1)
DBOS_VERSION = "3.4.0"


def ensure_dbos() -> None:
    """Fail early with the fix when the bench-only extra is missing."""
    try:
        import dbos  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(
            f"P5 needs dbos=={DBOS_VERSION}: run scripts/bench.sh (make bench), "
            "which installs the bench extras"
        ) from exc


def dbos_workflow() -> Any:
    from dbos import DBOS

    url = os.environ.get("RIVET_BENCH_DATABASE_URL")
    if url:
        system_url = url.replace("postgres://", "postgresql://", 1) + "_dbos"
    else:
        path = os.environ["RIVET_BENCH_SQLITE"] + "-dbos"
        # WAL like our leg (DBOS keeps SQLite's default journal otherwise);
        # the mode is stored in the file.
        sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").close()
        system_url = f"sqlite:///{path}"
    DBOS(config={"name": "rivet-bench", "system_database_url": system_url})

    @DBOS.step()
    def trivial(index: int) -> int:
        return index

    @DBOS.workflow()
    def steps_workflow(steps: int) -> int:
        for index in range(steps):
            trivial(index)
        return steps

    DBOS.launch()
    return steps_workflow


def leg(steps: int, trials: int) -> dict[str, Any]:
    from dbos import DBOS
    from django.db import connection, transaction

    from bench.benchapp.models import Entry
    from django_rivet import workflows
    from django_rivet.testing import run_until_idle
    from django_rivet.workflows.driver import DjangoDriver

    steps_workflow = dbos_workflow()

    def subject() -> float:
        started = time.perf_counter()
        handle = workflows.start("benchSteps", steps)
        status = run_until_idle(handle)
        elapsed = time.perf_counter() - started
        assert status == "completed", status
        return elapsed

    def without_check() -> float:
        DjangoDriver.checks_cancel = False
        try:
            return subject()
        finally:
            DjangoDriver.checks_cancel = True

    def baseline() -> float:
        started = time.perf_counter()
        assert steps_workflow(steps) == steps
        return time.perf_counter() - started

    insert = (
        f"INSERT INTO {connection.ops.quote_name(Entry._meta.db_table)} "
        f"({connection.ops.quote_name('value')}) VALUES (%s)"
    )
    value = bytes(range(64))

    def floor() -> float:
        started = time.perf_counter()
        for _ in range(steps):
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(insert, [value])
        return time.perf_counter() - started

    try:
        found = rounds(
            {
                "rivet": subject,
                "unchecked": without_check,
                "dbos": baseline,
                "floor": floor,
            },
            trials,
            warmup=1,
        )
    finally:
        DBOS.destroy()
    return {
        "dbos": paired(found, "rivet", "dbos"),
        "floor": paired(found, "rivet", "floor"),
        "check": paired(found, "rivet", "unchecked"),
    }


def run(ctx: Any) -> list:
    ensure_dbos()
    main = ctx.size((1_000, 7), (20, 1))
    curve = ctx.size((10_000, 1), None)  # quick: no curve leg
    out = []
    for db, label in (("sqlite", "SQLite-WAL"), ("postgresql", "PostgreSQL")):
        found = ctx.leg(
            "bench.measures.p05_workflow:leg",
            {"steps": main[0], "trials": main[1]},
            db=db,
        )
        out.append(
            row_from(ID, f"{main[0]:,} steps, {label}", "s", found["dbos"], "DBOS",
                     TARGET)
        )  # fmt: skip
        out.append(
            row_from(ID, f"{main[0]:,} steps vs the commit floor, {label}", "s",
                     found["floor"], f"{main[0]:,} commits", FLOOR_TARGET)
        )  # fmt: skip
        out.append(
            row_from(ID, f"{main[0]:,} steps, the cancel check, {label}", "s",
                     found["check"], "without it", CHECK_TARGET)
        )  # fmt: skip
        name = f"P5 workflow, {label}"
        ctx.curve(name, _point(main[0], found["dbos"]))
        # The 10k-step point costs minutes on PostgreSQL: SQLite only.
        if db == "sqlite" and curve is not None:
            big = ctx.leg(
                "bench.measures.p05_workflow:leg",
                {"steps": curve[0], "trials": curve[1]},
                db=db,
            )
            ctx.curve(name, _point(curve[0], big["dbos"]))
    return out


def _point(size: int, found: dict[str, Any]) -> dict[str, Any]:
    return {
        "size": size,
        "value": found["subject"]["median"],
        "baseline": found["baseline"]["median"],
        "unit": "steps",
    }
