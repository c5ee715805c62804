"""P7: one broadcast to N WebSocket connections vs raw group_send (broadcast.py)."""

from __future__ import annotations

from typing import Any

from bench.core import Target, row_from
from bench.measures import broadcast

ID = "P7"
TITLE = "broadcast to many WebSocket connections vs raw group_send"
TARGET = Target("ratio", "<=", 1.2)


def run(ctx: Any) -> list:
    found = broadcast.results(ctx)
    delivery = found["delivery"]
    label = (
        f"p50/p99 {delivery['rivet']['p50_ms']:.0f}/{delivery['rivet']['p99_ms']:.0f}"
        f" ms vs {delivery['raw']['p50_ms']:.0f}/{delivery['raw']['p99_ms']:.0f}"
    )
    return [
        row_from(
            ID,
            f"broadcast to {found['connections']:,} conns, all delivered ({label})",
            "ms",
            found,
            "group_send",
            TARGET,
            delivery=delivery,
        )
    ]
