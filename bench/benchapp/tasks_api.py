"""Task functions of the benchmarks (P16): one no-op, for both backends."""

import importlib.util

if importlib.util.find_spec("django.tasks") is not None:
    from django.tasks import task
else:
    from django_tasks import task


@task()
def noop() -> None:
    return None
