"""P41: another actor's calls while an action asks a workflow that cannot answer.

Subject: a bystander calls ``bench.increment`` on its own actor in a loop
while a thread makes one call to ``asker.ask``: an action that does
``handle.request("question", ..., timeout=5)`` on a workflow that waits for
another message, so nothing can answer before the action commits. Before
issue 40 the request waited its 5 s inside the action's transaction, and on
SQLite every other write of the process waited with it (the audit: another
actor's call stalled 4.9 s). Now it is refused at once
(``workflow/cannot_wait``). Each trial is the bystander's worst latency
over its calls (ms); baseline: the same loop with no asker.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from bench.core import Target, alternate, row_from

ID = "P41"
TITLE = "bystander's worst latency while an action requests in its transaction"
TARGET = Target("value", "<=", 100, "worst <= 100 ms")


def leg(calls: int, trials: int, timeout: float) -> dict[str, Any]:
    from django.db import connections

    from django_rivet import actors, workflows
    from django_rivet.testing import run_until_idle

    handle = workflows.start("benchDeaf", None, id="p41-deaf")
    run_until_idle(handle)
    bystander = actors.get_or_create("bench", "p41")
    asker = actors.get_or_create("asker", "p41")

    def worst(with_asker: bool) -> float:
        asked = threading.Event()

        def ask() -> None:
            try:
                asked.set()
                asker.call("ask", "p41-deaf", timeout)
            finally:
                connections.close_all()

        thread = threading.Thread(target=ask, daemon=True)
        if with_asker:
            thread.start()
            asked.wait()
        slowest = 0.0
        for _ in range(calls):
            started = time.perf_counter()
            try:
                bystander.call("increment")
            except Exception:  # actor/busy: it waited its whole lock timeout
                pass
            slowest = max(slowest, time.perf_counter() - started)
        if with_asker:
            thread.join()
        return slowest * 1000

    return alternate(lambda: worst(True), lambda: worst(False), trials, warmup=1)


def run(ctx: Any) -> list:
    calls, trials = ctx.size((200, 7), (20, 1))
    found = ctx.leg(
        "bench.measures.p41_request_bystander:leg",
        {"calls": calls, "trials": trials, "timeout": 5.0},
        db="sqlite",
    )
    return [row_from(ID, "worst latency, SQLite-WAL", "ms", found, "no asker", TARGET)]
