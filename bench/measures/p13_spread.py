"""P13: 50 sockets over 10 actors through two daphne processes (hot.py).

The load test's spread shape as a measure: PostgreSQL + Redis + two daphne
serving the quickstart's stack, client ``i`` on actor ``i % 10`` through
daphne ``(i // 2) % 2``. Reported against the raw consumer doing the same
work on the same servers (no target: the issue asks for the comparison).
"""

from __future__ import annotations

from typing import Any

from bench.core import Target
from bench.measures import hot
from bench.measures.p12_hot import rows

ID = "P13"
TITLE = "50 sockets over 10 actors, 2 daphne (PostgreSQL, Redis)"


def run(ctx: Any) -> list:
    found = hot.results(ctx, ID, webs=2, keys=10)
    shape = f"{found['clients']} sockets over 10 actors, 2 daphne"
    return rows(ID, found, shape, Target())
