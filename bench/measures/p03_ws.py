"""P3: WebSocket action round trip against a raw Channels consumer (transport.py)."""

from __future__ import annotations

from typing import Any

from bench.core import Target, paired, row_from
from bench.measures import transport

ID = "P3"
TITLE = "WebSocket action vs a raw Channels consumer"
TARGET = Target("ratio", ">=", 1.0)


def run(ctx: Any) -> list:
    out = []
    for label, found in transport.results(ctx).items():
        out.append(
            row_from(ID, f"WebSocket action, {label}", "rt/s",
                     paired(found, "rivet_ws", "raw_consumer"), "raw consumer",
                     TARGET,
                     floor=paired(found, "rivet_ws", "ws_noop")["ratio"])
        )  # fmt: skip
    return out
