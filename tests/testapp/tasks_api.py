"""Task functions of the tests of Django's Tasks framework on django-rivet.

Module level, as Django requires; imported by their module path when run.
"""

from __future__ import annotations

from tests.tasks.compat import task

CALLS: list[tuple[str, object]] = []


@task
def add(a, b):
    CALLS.append(("add", (a, b)))
    return a + b
