"""P2: HTTP action through daphne against the same commit and the plain ORM view.

Floors restated in issue 46 (see transport.py for the views): the action
against a view making the same durable commit (a raw ``UPDATE`` in a
transaction, same database, same stack), and against a plain Django view
doing the same work with the ORM (``select_for_update`` and ``save`` in
``atomic``). The no-op view, the floor until then, is still printed, as is
the plain view against it, for continuity with earlier tables.
"""

from __future__ import annotations

from typing import Any

from bench.core import Target, paired, row_from
from bench.measures import transport

ID = "P2"
TITLE = "HTTP action through daphne vs the same commit and the plain ORM view"
TARGET = Target("ratio", ">=", 0.8)  # against the same commit
ORM_TARGET = Target("ratio", ">=", 1.5)  # against the plain ORM view
OLD_FLOOR = Target(text="report (was >= 0.8x)")


def run(ctx: Any) -> list:
    out = []
    for label, found in transport.results(ctx).items():
        out.append(
            row_from(ID, f"HTTP action vs the same commit, {label}", "rt/s",
                     paired(found, "rivet_http", "same_commit"), "same commit", TARGET,
                     commit_vs_noop=paired(found, "same_commit", "http_noop")["ratio"])
        )  # fmt: skip
        out.append(
            row_from(ID, f"HTTP action vs the plain ORM view, {label}", "rt/s",
                     paired(found, "rivet_http", "plain_view"), "plain ORM view",
                     ORM_TARGET)
        )  # fmt: skip
        out.append(
            row_from(ID, f"HTTP action vs the no-op view (old floor), {label}", "rt/s",
                     paired(found, "rivet_http", "http_noop"), "no-op view", OLD_FLOOR)
        )  # fmt: skip
        out.append(
            row_from(ID, f"plain ORM view vs the no-op view, {label}", "rt/s",
                     paired(found, "plain_view", "http_noop"), "no-op view", Target())
        )  # fmt: skip
    return out
