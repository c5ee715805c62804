"""P2: HTTP action through daphne against the no-op view floor (see transport.py)."""

from __future__ import annotations

from typing import Any

from bench.core import Target, paired, row_from
from bench.measures import transport

ID = "P2"
TITLE = "HTTP action through daphne vs the no-op view floor"
TARGET = Target("ratio", ">=", 0.8)


def run(ctx: Any) -> list:
    out = []
    for label, found in transport.results(ctx).items():
        out.append(
            row_from(ID, f"HTTP action, {label}", "rt/s",
                     paired(found, "rivet_http", "http_noop"), "no-op view", TARGET)
        )  # fmt: skip
        out.append(
            row_from(ID, f"plain view, same ORM work, {label}", "rt/s",
                     paired(found, "plain_view", "http_noop"), "no-op view", Target(),
                     rivet_vs_plain=paired(found, "rivet_http", "plain_view")["ratio"])
        )  # fmt: skip
    return out
