"""P40: a call to an actor with a large cached state, against a small one.

Subject: ``big.read`` on an actor whose state holds a map of 100,000
integers (~1 MB encoded), cached in the process: the call changes nothing,
so what it costs beyond the small actor is finding that out. Before issue
40 every call walked the whole state against the value domain and encoded
it (57 ms in the audit); now cbor2 encodes it and the bytes are compared
with the stored ones. A second row writes one entry of the large state
(walked, encoded, written, measured for the cache). Baseline: the same
action on an actor with 10 entries, same process and database.
"""

from __future__ import annotations

from typing import Any

from bench.core import Target, alternate, per_op_us, row_from

ID = "P40"
TITLE = "call on a 100,000-entry cached state vs a small one"
TARGET = Target("none")


def leg(entries: int, trials: int, batch: int, write: bool) -> dict[str, Any]:
    from django_rivet import actors

    big = actors.get_or_create("big", "large")
    small = actors.get_or_create("big", "small")
    assert big.call("fill", entries) == entries
    small.call("fill", 10)
    action = "write" if write else "read"

    def call(handle: Any) -> None:
        handle.call(action, "7")

    return alternate(
        per_op_us(lambda: call(big), batch),
        per_op_us(lambda: call(small), batch),
        trials,
        warmup=1,
    )


def run(ctx: Any) -> list:
    entries, trials, batch = ctx.size((100_000, 9, 20), (1000, 1, 2))
    rows = []
    for write, what in ((False, "read (unchanged)"), (True, "write one entry")):
        found = ctx.leg(
            "bench.measures.p40_big_state:leg",
            {"entries": entries, "trials": trials, "batch": batch, "write": write},
            db="sqlite",
        )
        rows.append(
            row_from(ID, f"{what}, SQLite-WAL", "us", found, "10 entries", TARGET)
        )
    return rows
