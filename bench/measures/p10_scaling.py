"""P10: calls/s with 1, 10 and 100 distinct actors from 4 processes, PostgreSQL.

Four worker processes (spawned once, Django set up in each) call
``handle.call("increment")`` in a loop for a fixed time, each call on an
actor picked at random among K (1, 10 or 100); the value is the calls per
second of all four together. Baseline: one of those processes calling one
actor alone for the same time -- the sequential rate. The trials rotate the
four configurations. On one actor, the row lock serializes every call:
the rate may fall below the baseline's but must not collapse (lock waits
turning into timeouts or retries storms). With more actors, calls run in
parallel up to what 2 cores and one PostgreSQL server give.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from typing import Any

from bench.core import Target, paired, rounds, row_from

ID = "P10"
TITLE = "calls/s with 1/10/100 actors from 4 processes (PostgreSQL)"
TARGET = Target("ratio", ">=", 0.5, ">= 0.5x (no collapse)")
PROCESSES = 4
FANOUT = (1, 10, 100)


def worker(conn: Any, env: dict[str, str]) -> None:
    import os

    os.environ.update(env)
    from bench.leg import setup_django

    setup_django()
    from django_rivet import actors

    handles: dict[str, Any] = {}
    conn.send("ready")
    while True:
        command = conn.recv()
        if command is None:
            return
        keys, start_at, duration = command
        for key in keys:
            if key not in handles:
                handles[key] = actors.get_or_create("bench", key)
        chosen = [handles[key] for key in keys]
        time.sleep(max(0.0, start_at - time.time()))
        end = start_at + duration
        calls = 0
        while time.time() < end:
            random.choice(chosen).call("increment")
            calls += 1
        conn.send(calls)


def leg(duration: float, trials: int) -> dict[str, Any]:
    import os

    env = {k: v for k, v in os.environ.items() if k.startswith(("RIVET_", "DJANGO_"))}
    spawn = multiprocessing.get_context("spawn")
    pipes, procs = [], []
    for _ in range(PROCESSES):
        parent, child = spawn.Pipe()
        proc = spawn.Process(target=worker, args=(child, env), daemon=True)
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    for pipe in pipes:
        assert pipe.recv() == "ready"

    def measure(processes: int, actors: int) -> Any:
        keys = [f"p10-{actors}-{i}" for i in range(actors)]

        def trial() -> float:
            start_at = time.time() + 0.3
            for pipe in pipes[:processes]:
                pipe.send((keys, start_at, duration))
            return sum(pipe.recv() for pipe in pipes[:processes]) / duration

        return trial

    try:
        measures = {"baseline": measure(1, 1)}
        for count in FANOUT:
            measures[f"{count}"] = measure(PROCESSES, count)
        return rounds(measures, trials, warmup=1)
    finally:
        for pipe in pipes:
            pipe.send(None)
        for proc in procs:
            proc.join(10)


def run(ctx: Any) -> list:
    params = ctx.size({"duration": 2.0, "trials": 5}, {"duration": 0.1, "trials": 1})
    found = ctx.leg("bench.measures.p10_scaling:leg", params, db="postgresql")
    return [
        row_from(ID, f"{PROCESSES} processes, {count} actor{'s' if count > 1 else ''}",
                 "calls/s", paired(found, str(count), "baseline"),
                 "1 process, 1 actor", TARGET)
        for count in FANOUT
    ]  # fmt: skip
