"""Background work: retries, workflow queues, scheduled workflows (rivet.E004,
E701, E702).

Messages are module constants so tests compare them by equality.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, register

from .. import clock
from ..conf import DEFAULTS, rivet_settings
from ..exceptions import InvalidCron
from ..scheduling import crontab, retries, workflow_schedules
from ..workflow_runtime import registry as workflow_registry
from ..workflow_runtime.queues import QUEUE_NAME_MAX_LENGTH
from .settings import E004, E004_HINT

__all__ = ["E701", "E701_HINT", "E702", "E702_HINT", "check_background_work"]

E701 = "RIVET['WORKFLOW_QUEUES'] {problem}."
E701_HINT = (
    "Map each queue name to its limits, e.g. {'emails': {'concurrency': 5, "
    "'rate_limit': (100, 60.0)}}: concurrency a positive integer, rate_limit "
    "(a positive integer, a positive number of seconds); None or absent for "
    "no limit."
)
E702 = "Scheduled workflow {name!r} ({where}) {problem}."
E702_HINT = (
    "Use five cron fields (or @daily...) and an IANA zone name; names of "
    "scheduled workflows are at most 200 characters (tick ids add the time)."
)
_QUEUE_OPTIONS = {"concurrency", "rate_limit"}
SCHEDULED_NAME_MAX_LENGTH = 200


@register(Tags.compatibility)
def check_background_work(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check the retry settings, the workflow queues and the cron workflows."""
    return _retry_settings() + _queues() + _scheduled_workflows()


def _retry_settings() -> list[Any]:
    user = rivet_settings.user_settings
    errors = []

    def bad(key: str, expected: str) -> None:
        errors.append(
            Error(
                E004.format(key=key, expected=expected),
                hint=E004_HINT,
                obj="settings.RIVET",
                id="rivet.E004",
            )
        )

    retries_setting = user.get("SCHEDULE_MAX_RETRIES", DEFAULTS["SCHEDULE_MAX_RETRIES"])
    try:
        if retries.check_max_retries(retries_setting) is None:
            raise TypeError
    except (TypeError, ValueError):
        bad("SCHEDULE_MAX_RETRIES", f"an integer from 0 to {retries.MAX_RETRIES_LIMIT}")
    for key in ("RETRY_BACKOFF_BASE", "RETRY_BACKOFF_MAX"):
        if not _positive(user.get(key, DEFAULTS[key]), int | float):
            bad(key, "a positive number of seconds")
    return errors


def _positive(value: Any, kind: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, kind) and value > 0


def _queue_problems(queues: Any) -> list[str]:
    if not isinstance(queues, dict):
        return ["is not a dict of queue names to their limits"]
    problems = []
    for name, options in queues.items():
        if not isinstance(name, str) or not 0 < len(name) <= QUEUE_NAME_MAX_LENGTH:
            problems.append(
                f"has a queue name {name!r} that is not 1 to "
                f"{QUEUE_NAME_MAX_LENGTH} characters"
            )
            continue
        if not isinstance(options, dict):
            problems.append(f"entry {name!r} is not a dict of limits")
            continue
        unknown = sorted(set(options) - _QUEUE_OPTIONS)
        if unknown:
            problems.append(f"entry {name!r} has unknown options {unknown}")
        concurrency = options.get("concurrency")
        if concurrency is not None and not _positive(concurrency, int):
            problems.append(f"entry {name!r}: concurrency must be a positive integer")
        rate = options.get("rate_limit")
        if rate is not None and not (
            isinstance(rate, list | tuple)
            and len(rate) == 2
            and _positive(rate[0], int)
            and _positive(rate[1], int | float)
        ):
            problems.append(
                f"entry {name!r}: rate_limit must be (starts, seconds), both positive"
            )
    return problems


def _queues() -> list[Any]:
    queues = rivet_settings.user_settings.get("WORKFLOW_QUEUES", {})
    return [
        Error(
            E701.format(problem=problem),
            hint=E701_HINT,
            obj="settings.RIVET",
            id="rivet.E701",
        )
        for problem in _queue_problems(queues)
    ]


def _scheduled_workflows() -> list[Any]:
    errors = []
    for name, definition in workflow_schedules.definitions().items():
        assert definition.cron is not None
        problem = None
        if len(name) > SCHEDULED_NAME_MAX_LENGTH:
            problem = f"has a name longer than {SCHEDULED_NAME_MAX_LENGTH} characters"
        else:
            zone = workflow_schedules.zone_of(definition)
            try:
                crontab.validate_cron(definition.cron, zone, clock.now_datetime())
            except InvalidCron as exc:
                problem = f"cannot be scheduled: {exc.message}"
        if problem is not None:
            where = workflow_registry.describe(definition)
            errors.append(
                Error(
                    E702.format(name=name, where=where, problem=problem),
                    hint=E702_HINT,
                    obj=where,
                    id="rivet.E702",
                )
            )
    return errors
