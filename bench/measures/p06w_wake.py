"""P6L: one wake of a workflow with a long history, with the live window on.

Subject: a ``benchWakeLive`` workflow whose history holds N completed steps
(prepared as P6 prepares it) runs on a worker thread (``execution.run``, as
a Celery task runs it) with ``RIVET["WORKFLOW_LIVE_WAIT"]`` on: it waits
for a message in its live window, receives it, runs one step and waits
again, history in memory. A trial sends a batch of messages from the main
thread (``handle.send``), each once the step after the previous one ran,
and reports the time per wake (ms): send, in-process wake, receive, record,
step, next wait. The one load + replay of the run is before the trials
(untimed); nothing is reloaded or replayed during them.

Baseline: per message, a raw ``INSERT`` of a message row (into another
workflow's inbox) and a ``SELECT`` of one row -- the least a wake has to
write and read.

Issue 46 calls this P6w with the window on; P6w (``p06_wake.py``) is the
same wake as a claimed run, as without the window.

Floor (reported): the same wake's statements, raw, in one thread --
the send's commit (the row's wake signal, the message), the read of the
oldest message, the record's commit (four KV rows, the message's removal),
in as few round trips as the database allows. On SQLite they alone cost
about 2.5x the baseline: the 3x target leaves the engine, the driver and the
hand-off between threads about half a baseline.

Growth: the per-wake cost at the largest history against the smallest.

Idle (reported, smallest history): each message sent once the run has
recorded the previous one and waits again, timed from the send to the
step: what a workflow woken now and then sees. Back to back, a wake's
record overlaps the next send and the two commits set the pace; here the
run's work after the send is the wake's latency (on PostgreSQL the
message handed over in process, no inbox read: ``workflows.handoff``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench.core import Row, Target, row_from

ID = "P6L"
TITLE = "one wake of a long-history workflow, live window on, vs INSERT + SELECT"
TARGET = Target("ratio", "<=", 3.0)
GROWTH_TARGET = Target("ratio", "<=", 1.2)
# Against the wake's own statements, raw (bench.internals.wake_statements):
# reported, what the engine, the driver and the hand-off between threads
# add to what a wake has to commit and read.
FLOOR_TARGET = Target()
LIVE_WAIT = 600  # seconds: the window outlasts the whole leg
# Before each wake of the idle row (seconds): the run has recorded the
# last one and waits, as a run woken a message at a time does; its wake is
# then the send, the hand-off, the step (reported: no target).
IDLE_PAUSE = 0.004

_stepped = threading.Event()
Wake = Callable[[], None]


def _definition() -> Any:
    from bench.benchapp.workflows import steps
    from django_rivet.workflows import workflow

    def after(body: Any) -> Any:
        _stepped.set()
        return body

    @workflow(name="benchWakeLive")
    async def bench_wake(ctx: Any, count: int) -> None:
        """``count`` steps, then forever: a message, one step, a wait."""
        await steps(ctx, count)
        index = 0
        while True:
            message = await ctx.messages.next(f"m{index}")
            await ctx.step(f"after{index}", lambda body=message.body: after(body))
            index += 1

    return bench_wake


@contextlib.contextmanager
def live_run(size: int, profiler: Any = None) -> Iterator[tuple[str, Wake]]:
    """Start the live run of ``size`` entries; yield its id and one wake.

    A wake sends a message and returns once the step after it ran.
    ``profiler`` (a pyinstrument ``Profiler``, for ``bench.profile P6L``)
    samples the run's thread from its start to its end.
    """
    from django.conf import settings
    from django.db import connection
    from django.test import override_settings

    from bench import internals
    from bench.measures.p04_flush import build, run_private
    from django_rivet import workflows
    from django_rivet.engine import InMemoryDriver
    from django_rivet.workflows import execution, live, registry

    rivet = {**getattr(settings, "RIVET", {}), "WORKFLOW_LIVE_WAIT": LIVE_WAIT}
    with registry.register_temporarily(_definition()), override_settings(RIVET=rivet):
        handle = workflows.start("benchWakeLive", size)
        driver = InMemoryDriver()
        run_private(build(driver, size).flush())
        internals.add_kv_rows(handle.workflow_id, driver.kv)
        ran: list[Any] = []

        def work() -> None:
            try:
                if profiler is not None:
                    profiler.start()
                ran.append(execution.run(handle.workflow_id))
            finally:
                if profiler is not None:
                    profiler.stop()
                connection.close()

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        deadline = time.monotonic() + 600
        while handle.workflow_id not in live._listeners:  # loaded, replayed
            assert time.monotonic() < deadline, "the run never waited"
            time.sleep(0.01)
        sent = iter(range(10**9))

        def wake() -> None:
            _stepped.clear()
            handle.send(f"m{next(sent)}", None)
            assert _stepped.wait(60), "the live run did not wake"

        try:
            yield handle.workflow_id, wake
        finally:
            live.end_all()
            worker.join(60)
            live.reopen()
        assert ran == ["sleeping"], ran


def leg(size: int, trials: int, batch: int, idle: bool = False) -> dict[str, Any]:
    from django.db import connection
    from django.utils import timezone

    from bench import internals
    from bench.core import paired, rounds
    from django_rivet.models import Workflow

    with live_run(size) as (workflow_id, wake):
        other = Workflow.objects.create(id="p6w-baseline", name="benchDeaf")
        insert, select = internals.message_and_row_sql()
        floor = Workflow.objects.create(id="p6w-floor", name="benchDeaf")
        raw_wake = internals.wake_statements(floor.pk)

        def subject() -> float:
            started = time.perf_counter()
            for _ in range(batch):
                wake()
            return (time.perf_counter() - started) * 1000 / batch

        def baseline() -> float:
            started = time.perf_counter()
            for _ in range(batch):
                with connection.cursor() as cursor:
                    cursor.execute(insert, [other.pk, "m", b"\xf6", timezone.now()])
                    cursor.execute(select, [workflow_id])
                    cursor.fetchone()
            return (time.perf_counter() - started) * 1000 / batch

        def statements() -> float:
            started = time.perf_counter()
            for _ in range(batch):
                raw_wake()
            return (time.perf_counter() - started) * 1000 / batch

        def idle_wake() -> float:
            took = 0.0
            for _ in range(batch):
                time.sleep(IDLE_PAUSE)  # (untimed: the run records, then waits)
                started = time.perf_counter()
                wake()
                took += time.perf_counter() - started
            return took * 1000 / batch

        subjects = {"wake": subject, "baseline": baseline, "floor": statements}
        if idle:
            subjects["idle"] = idle_wake
        found = rounds(subjects, trials, warmup=1)
    result = paired(found, "wake", "baseline")
    result["floor"] = paired(found, "wake", "floor")
    if idle:
        result["idle"] = paired(found, "idle", "baseline")
    result["wakes"] = (trials + 1) * batch
    return result


def run(ctx: Any) -> list:
    sizes, trials, batch = ctx.size(([100, 10_000, 100_000], 5, 40), ([100], 1, 5))
    out: list[Row] = []
    for db, label in (("sqlite", "SQLite-WAL"), ("postgresql", "PostgreSQL")):
        found: dict[int, Any] = {}
        for size in sizes:
            found[size] = ctx.leg(
                "bench.measures.p06w_wake:leg",
                {
                    "size": size,
                    "trials": trials,
                    "batch": batch,
                    "idle": size == sizes[0],
                },
                db=db,
            )
            out.append(
                row_from(
                    ID,
                    f"one wake, {size:,} entries, live window, {label}",
                    "ms",
                    found[size],
                    "INSERT + SELECT",
                    TARGET,
                )
            )
            out.append(
                row_from(
                    ID,
                    f"one wake, {size:,} entries, vs its own statements, {label}",
                    "ms",
                    found[size]["floor"],
                    "the wake's SQL, raw",
                    FLOOR_TARGET,
                )
            )
            if "idle" in found[size]:
                out.append(
                    row_from(
                        ID,
                        f"one wake of an idle run, {size:,} entries, {label}",
                        "ms",
                        found[size]["idle"],
                        "INSERT + SELECT",
                        FLOOR_TARGET,
                    )
                )
        small, big = min(sizes), max(sizes)
        if big != small:
            grown = {
                "subject": found[big]["subject"],
                "baseline": found[small]["subject"],
                "ratio": found[big]["subject"]["median"]
                / found[small]["subject"]["median"],
            }
            out.append(
                row_from(
                    ID,
                    f"one wake at {big:,} entries vs {small:,}, {label}",
                    "ms",
                    grown,
                    f"{small:,} entries",
                    GROWTH_TARGET,
                )
            )
    return out
