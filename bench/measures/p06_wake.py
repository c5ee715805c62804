"""P6w: one wake of a workflow with a long history.

Subject: a ``benchWake`` workflow whose history holds N completed steps (100,
10,000, 100,000; prepared as P6 prepares its history) waits for a message.
Each wake is ``handle.send`` of one message, then the run a worker makes
when it is woken (``rivet.run_workflow``: claim, load, replay, receive the
message, run one trivial step, record the next wait, release); a trial
times a batch of wakes and gives the cost per wake. Every wake adds to the
history (a message and a step), so the sizes are the history before the
first one. 200 wakes are timed per size, in trials of 10 (of 2 at 100,000
entries), after a warm-up trial; when they cost more than ``BUDGET``
seconds in all (each wake replaying the whole history, as today), fewer,
at least 3 trials: the row says how many.

Baseline: what a wake has to do at least: a raw ``INSERT`` of the message
into the same inbox table, in a transaction of its own (a durable commit),
plus a ``SELECT`` of one row (the workflow's, by its primary key). Same
batch size, alternating with the subject's trials; the baseline's rows go
to another workflow's inbox and are deleted between trials (untimed).

Growth: the cost per wake at the largest history over the smallest (two
legs, not paired: each its own process and database).

The history cache (issue 46, ``RIVET["WORKFLOW_CACHE_SIZE"]``): a second
set of rows makes the same claimed runs with it on; the warm-up trial
fills it, so each timed wake skips the history's read (not its replay).

The live window (issue 46, ``RIVET["WORKFLOW_LIVE_WAIT"]``): when the build
has that setting, a second set of rows measures the same wakes with it on
(a settings override in the leg) and the embedded worker running the
workflow, as a deployment's would: the first wake claims it, the next ones
are meant to reach the waiting coroutine in process. A wake ends when its
step is durable (``ctx.step`` returned, seen through the workflow's
``WAKE_HOOK``); recording the next wait overlaps the next send. Without the
setting those rows say "n/a".
"""

from __future__ import annotations

import threading
import time
from typing import Any

from bench.core import Row, Target, alternate, row_from

ID = "P6w"
TITLE = "one wake of a long-history workflow vs insert + SELECT"
TARGET = Target("ratio", "<=", 3.0)
GROWTH_TARGET = Target("ratio", "<=", 1.2)
LIVE_SETTING = "WORKFLOW_LIVE_WAIT"
CACHE_SETTING = "WORKFLOW_CACHE_SIZE"
LIVE_WAIT = 30.0  # seconds: longer than any gap between two wakes of a leg
# Seconds of wakes per leg, at most (past the warm-up): 200 wakes when they
# are cheap, fewer when each replays the whole history (today's build at
# 10,000 and 100,000 entries), keeping the full run near 3 minutes.
BUDGET = 20.0


def has_setting(name: str) -> bool:
    """Tell whether this build of django-rivet has the setting ``name``."""
    from django_rivet.conf import rivet_settings

    return name in getattr(rivet_settings, "declared", {})


def has_live_window() -> bool:
    """Tell whether this build of django-rivet has the live window setting."""
    return has_setting(LIVE_SETTING)


def baseline_trial(batch: int) -> Any:
    """Return P6w's baseline trial: ``batch`` x (insert a message, SELECT a row)."""
    from django.db import connection, transaction

    from bench import internals
    from django_rivet import clock, workflows
    from django_rivet.engine import encode_message_body

    # Another workflow's inbox (never run), so the subject's stays its own.
    inbox = workflows.start("benchSteps", 0).workflow_id
    insert, select = internals.message_and_row_sql()
    body = encode_message_body(None)
    adapt = connection.ops.adapt_datetimefield_value

    def trial() -> float:
        started = time.perf_counter()
        for index in range(batch):
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    insert, [inbox, f"m{index}", body, adapt(clock.now_datetime())]
                )
            with connection.cursor() as cursor:
                cursor.execute(select, [inbox])
                assert cursor.fetchone() is not None
        elapsed = time.perf_counter() - started
        internals.delete_messages(inbox)
        return elapsed * 1000 / batch

    return trial


def timed(
    subject: Any, baseline: Any, batch: int, wakes: int, budget: float
) -> dict[str, Any]:
    """Alternate trials of ``batch`` wakes: ``wakes`` in all, or what fits.

    One warm-up trial of each (dropped) estimates a wake's cost; the trials
    that follow are as many as make ``wakes``, but no more than about
    ``budget`` seconds of the subject's time allows (at least 3), so a slow
    build (each wake replaying 100,000 entries) keeps the run short and a
    fast one times every wake. The result says how many wakes were timed.
    """
    baseline()
    estimate = subject()  # ms per wake
    fit = int(budget * 1000 / max(estimate * batch, 1e-9))
    trials = min(wakes // batch, max(3, fit))
    result = alternate(subject, baseline, trials, warmup=0)
    result["wakes"] = trials * batch
    return result


def leg(size: int, batch: int, wakes: int, budget: float) -> dict[str, Any]:
    """Each wake a claimed run, as today; milliseconds per wake."""
    from bench import internals
    from bench.measures.p06_replay import with_history

    handle, kv_rows = with_history("benchWake", size)
    sent = iter(range(10**9))

    def subject() -> float:
        started = time.perf_counter()
        for _ in range(batch):
            handle.send(f"m{next(sent)}", None)
            status = internals.run_workflow(handle.workflow_id)
            assert status == "sleeping", status
        return (time.perf_counter() - started) * 1000 / batch

    result = timed(subject, baseline_trial(batch), batch, wakes, budget)
    result["kv_rows"] = kv_rows
    return result


def cache_leg(size: int, batch: int, wakes: int, budget: float) -> dict[str, Any]:
    """The same claimed runs with the history cache on (warm after a wake)."""
    if not has_setting(CACHE_SETTING):
        return {"skipped": f"this build has no RIVET[{CACHE_SETTING!r}]"}
    from django.conf import settings
    from django.test import override_settings

    cached = {
        **getattr(settings, "RIVET", {}),
        CACHE_SETTING: 100,
        "WORKFLOW_CACHE_BYTES": 1 << 30,  # 100,000 entries fit
    }
    from django_rivet.workflows import history_cache

    with override_settings(RIVET=cached):
        result = leg(size, batch, wakes, budget)
    # Every wake after the first is served (a miss would read the history).
    result["cache_hits"] = history_cache.cache.hits
    result["cache_misses"] = history_cache.cache.misses
    assert result["cache_hits"] >= result["wakes"], result
    return result


def live_leg(size: int, batch: int, wakes: int, budget: float) -> dict[str, Any]:
    """The same wakes with the live window on and the embedded worker running."""
    if not has_live_window():
        return {"skipped": f"this build has no RIVET[{LIVE_SETTING!r}]"}
    from django.conf import settings
    from django.test import override_settings

    from bench import internals
    from bench.benchapp import workflows as bench_workflows
    from bench.measures.p06_replay import with_history

    # The history and its first run with the window off: the run releases.
    handle, kv_rows = with_history("benchWake", size)
    done = threading.Condition()
    reached = [-1]

    def hook(index: int) -> None:
        with done:
            if index > reached[0]:
                reached[0] = index
                done.notify_all()

    sent = iter(range(10**9))

    def subject() -> float:
        started = time.perf_counter()
        for _ in range(batch):
            index = next(sent)
            handle.send(f"m{index}", None)
            with done:
                finished = done.wait_for(
                    lambda index=index: reached[0] >= index, timeout=120
                )
            if not finished:
                raise TimeoutError(f"wake {index} did not finish in 120 s")
        return (time.perf_counter() - started) * 1000 / batch

    live = {**getattr(settings, "RIVET", {}), LIVE_SETTING: LIVE_WAIT}
    bench_workflows.WAKE_HOOK = hook
    with override_settings(RIVET=live):
        internals.start_embedded_worker()
        try:
            result = timed(subject, baseline_trial(batch), batch, wakes, budget)
        finally:
            internals.stop_embedded_worker()
            bench_workflows.WAKE_HOOK = None
    result["kv_rows"] = kv_rows
    return result


def run(ctx: Any) -> list:
    # size: (wakes per trial, wakes timed at most); one more trial warms up.
    sizes = ctx.size(
        {100: (10, 200), 10_000: (10, 200), 100_000: (2, 200)},
        {10: (2, 2), 50: (2, 2)},  # quick: two tiny sizes, to run every row
    )
    budget = ctx.size(BUDGET, 1.0)
    out: list[Row] = []
    for db, label in (("sqlite", "SQLite-WAL"), ("postgresql", "PostgreSQL")):
        for mode, function in (
            ("claimed run", "leg"),
            ("claimed run, history cache warm", "cache_leg"),
        ):
            found = {}
            for size, (batch, wakes) in sizes.items():
                result = ctx.leg(
                    f"bench.measures.p06_wake:{function}",
                    {"size": size, "batch": batch, "wakes": wakes, "budget": budget},
                    db=db,
                )
                if "skipped" in result:
                    out.append(
                        Row(ID, f"one wake, {mode}, {label}: {result['skipped']}",
                            "ms", {}, target=TARGET)
                    )  # fmt: skip
                    break
                found[size] = result
                out.append(
                    row_from(ID, f"one wake, {mode}, {size:,} entries, {label} "
                             f"({result['wakes']} wakes)", "ms", result,
                             "insert + SELECT", TARGET)
                )  # fmt: skip
            if len(found) == len(sizes):
                small, large = min(found), max(found)
                out.append(
                    Row(
                        ID,
                        f"per-wake growth, {mode}, {small:,} -> {large:,} entries, "
                        f"{label}",
                        "ms",
                        value=found[large]["subject"],
                        baseline=found[small]["subject"],
                        baseline_label=f"{small:,} entries",
                        ratio=found[large]["subject"]["median"]
                        / found[small]["subject"]["median"],
                        target=GROWTH_TARGET,
                    )
                )
    return out
