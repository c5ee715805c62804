"""What a ``TASKS`` entry naming ``RivetTaskBackend`` may hold (``rivet.E901``).

The backend's ``check()`` returns these messages (Django's tasks checks call
it); ``django_rivet.checks`` also runs them where those checks do not run
(the backport without ``"django_tasks"`` in ``INSTALLED_APPS``). Messages
are module constants so tests compare them by equality.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.core.checks import CheckMessage, Error

from ..conf import MAX_RETRIES, docs_url

__all__ = ["E901", "E901_HINT", "OPTIONS", "QUEUE_NAME_MAX_LENGTH", "options_problems"]

E901 = "TASKS[{alias!r}] (RivetTaskBackend) {problem}."
E901_HINT = (
    "QUEUES is a list of queue names (1 to 128 characters); OPTIONS may hold "
    "max_retries, an integer from 0 to {limit} (retries after the first "
    "attempt). See {docs}"
)
#: The keys of ``OPTIONS``, and their defaults.
OPTIONS: dict[str, Any] = {"max_retries": 0}
QUEUE_NAME_MAX_LENGTH = 128


def _problems(queues: Iterable[Any], options: Any) -> list[str]:
    problems = []
    for name in queues:
        if not isinstance(name, str) or not 0 < len(name) <= QUEUE_NAME_MAX_LENGTH:
            problems.append(
                f"has a queue name {name!r} that is not 1 to 128 characters"
            )
    if not isinstance(options, Mapping):
        return [*problems, f"has OPTIONS {options!r} that is not a dict"]
    for key in sorted(set(options) - set(OPTIONS), key=str):
        problems.append(f"has an unknown option {key!r} in OPTIONS")
    retries = options.get("max_retries", 0)
    if (
        isinstance(retries, bool)
        or not isinstance(retries, int)
        or not 0 <= retries <= MAX_RETRIES
    ):
        problems.append(
            f"has OPTIONS['max_retries'] {retries!r}, not an integer from 0 "
            f"to {MAX_RETRIES}"
        )
    return problems


def options_problems(
    alias: str, queues: Iterable[Any], options: Any
) -> list[CheckMessage]:
    """Return a ``rivet.E901`` error for each problem of the entry ``alias``."""
    hint = E901_HINT.format(limit=MAX_RETRIES, docs=docs_url("tasks", "settings"))
    return [
        Error(
            E901.format(alias=alias, problem=problem),
            hint=hint,
            obj=f"settings.TASKS[{alias!r}]",
            id="rivet.E901",
        )
        for problem in _problems(queues, options)
    ]
