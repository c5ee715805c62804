"""P12: one hot actor, 50 sockets calling and watching it, through daphne (hot.py).

PostgreSQL + Redis + one daphne serving the quickstart's stack. Rows:
increments answered per second against the raw consumer doing the same work
(the target), event frames delivered per second, and the calls' latency.
"""

from __future__ import annotations

from typing import Any

from bench.core import Row, Target, row_from
from bench.measures import hot

ID = "P12"
TITLE = "one hot actor, 50 sockets calling and watching it (daphne, PostgreSQL)"
TARGET = Target("ratio", ">=", 1.0)


def rows(measure_id: str, found: dict[str, Any], shape: str, target: Target) -> list:
    """The rows of a hot.py leg: increments/s, events/s, latency."""
    rivet, raw = found["rivet"], found["raw"]
    missing = rivet["events_missing"] + raw["events_missing"]
    note = f", {missing:,} events missing" if missing else ""
    latency = (
        f"p50/p99 {rivet['p50_ms']:.0f}/{rivet['p99_ms']:.0f} ms"
        f" vs {raw['p50_ms']:.0f}/{raw['p99_ms']:.0f}"
    )
    return [
        row_from(measure_id, f"{shape}: increments ({latency})", "/s",
                 found["increments"], "raw consumer", target,
                 latency={"rivet": [rivet["p50_ms"], rivet["p99_ms"]],
                          "raw": [raw["p50_ms"], raw["p99_ms"]]},
                 events_missing={"rivet": rivet["events_missing"],
                                 "raw": raw["events_missing"]},
                 server_cpu_ms_per_increment={
                     side: found[side]["server_cpu_ms_per_increment"]
                     for side in ("rivet", "raw")},
                 client_cpu_ms_per_increment={
                     side: found[side]["client_cpu_ms_per_increment"]
                     for side in ("rivet", "raw")}),
        row_from(measure_id, f"{shape}: events delivered{note}", "/s",
                 found["events"], "raw consumer", Target()),
        Row(id=measure_id, measure=f"{shape}: call latency p99", unit="ms",
            value={"median": rivet["p99_ms"]}, baseline={"median": raw["p99_ms"]},
            baseline_label="raw consumer",
            ratio=rivet["p99_ms"] / raw["p99_ms"] if raw["p99_ms"] else None),
    ]  # fmt: skip


def run(ctx: Any) -> list:
    found = hot.results(ctx, ID, webs=1, keys=1)
    shape = f"{found['clients']} sockets on 1 actor, 1 daphne"
    return rows(ID, found, shape, TARGET)
