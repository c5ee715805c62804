"""Background work: workflow queues, scheduled workflows, the live window,
the history cache (rivet.E701, E702, E703, E704, E705).

The retry settings' kinds are declared with the settings (``conf``), and
reported as ``rivet.E004`` with the others.

Messages are module constants so tests compare them by equality.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import Tags, register

from .. import clock, crontab
from ..conf import docs_url, rivet_settings
from ..conf.kinds import CACHE_SIZE, LIVE_WAIT, POSITIVE_INTEGER
from ..exceptions import InvalidCron
from ..workflows import registry as workflow_registry
from ..workflows import scheduled
from ..workflows.queues import QUEUE_NAME_MAX_LENGTH
from .base import message

__all__ = [
    "E701",
    "E701_HINT",
    "E702",
    "E702_HINT",
    "E703",
    "E703_HINT",
    "E704",
    "E704_HINT",
    "E705",
    "E705_HINT",
    "check_background_work",
]

E701 = "RIVET['WORKFLOW_QUEUES'] {problem}."
E701_HINT = (
    "Map each queue name to its limits, e.g. {'emails': {'concurrency': 5, "
    "'rate_limit': (100, 60.0), 'max_queued': 10000}}: concurrency, "
    "partition_concurrency, worker_concurrency and max_queued positive "
    "integers, rate_limit and partition_rate_limit (a positive integer, a "
    "positive number of seconds); None or absent for no limit."
)
E702 = "Scheduled workflow {name!r} ({where}) {problem}."
E702_HINT = (
    "Use five cron fields (or @daily...) and an IANA zone name; names of "
    "scheduled workflows are at most 200 characters (tick ids add the time)."
)
# The sentence InvalidSetting says too: the kind is declared in conf.
E703 = "RIVET['WORKFLOW_LIVE_WAIT'] must be " + LIVE_WAIT.expected + "."
E703_HINT = (
    "It is how long a waiting workflow run stays in memory (0 turns it off); see {docs}"
)
E704 = "RIVET['WORKFLOW_CACHE_SIZE'] must be " + CACHE_SIZE.expected + "."
E704_HINT = (
    "It is how many workflow histories a process keeps between runs (0 turns "
    "the cache off); see {docs}"
)
E705 = "RIVET['WORKFLOW_CACHE_BYTES'] must be " + POSITIVE_INTEGER.expected + "."
E705_HINT = "It bounds the bytes of the histories a process keeps; see {docs}"
_CACHE = {"WORKFLOW_CACHE_SIZE": ("rivet.E704", E704, E704_HINT)}
_CACHE["WORKFLOW_CACHE_BYTES"] = ("rivet.E705", E705, E705_HINT)
_COUNTS = ("concurrency", "partition_concurrency", "worker_concurrency", "max_queued")
_RATES = ("rate_limit", "partition_rate_limit")
_QUEUE_OPTIONS = {*_COUNTS, *_RATES}
SCHEDULED_NAME_MAX_LENGTH = 200


@register(Tags.compatibility)
def check_background_work(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check the workflow queues, the cron workflows, the live window and cache."""
    return _queues() + _scheduled_workflows() + _live_wait() + _history_cache()


def _live_wait() -> list[Any]:
    if rivet_settings.problem("WORKFLOW_LIVE_WAIT") is None:
        return []
    hint = E703_HINT.format(docs=docs_url("workflows", "the-live-window"))
    return [message("rivet.E703", E703, hint, "settings.RIVET")]


def _history_cache() -> list[Any]:
    docs = docs_url("workflows", "the-history-cache")
    return [
        message(check, text, hint.format(docs=docs), "settings.RIVET")
        for key, (check, text, hint) in _CACHE.items()
        if rivet_settings.problem(key) is not None
    ]


def _positive(value: Any, kind: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, kind) and value > 0


def _queue_problems() -> list[str]:
    expected = rivet_settings.problem("WORKFLOW_QUEUES")
    if expected is not None:
        return [f"is not {expected}"]
    queues = rivet_settings.WORKFLOW_QUEUES
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
        for option in _COUNTS:
            count = options.get(option)
            if count is not None and not _positive(count, int):
                problems.append(f"entry {name!r}: {option} must be a positive integer")
        for option in _RATES:
            rate = options.get(option)
            if rate is not None and not (
                isinstance(rate, list | tuple)
                and len(rate) == 2
                and _positive(rate[0], int)
                and _positive(rate[1], int | float)
            ):
                problems.append(
                    f"entry {name!r}: {option} must be (starts, seconds), both positive"
                )
    return problems


def _queues() -> list[Any]:
    return [
        message("rivet.E701", E701.format(problem=problem), E701_HINT)
        for problem in _queue_problems()
    ]


def _scheduled_workflows() -> list[Any]:
    errors = []
    for name, definition in scheduled.definitions().items():
        assert definition.cron is not None
        problem = None
        if len(name) > SCHEDULED_NAME_MAX_LENGTH:
            problem = f"has a name longer than {SCHEDULED_NAME_MAX_LENGTH} characters"
        else:
            zone = scheduled.zone_of(definition)
            try:
                crontab.validate_cron(definition.cron, zone, clock.now_datetime())
            except InvalidCron as exc:
                problem = f"cannot be scheduled: {exc.message}"
        if problem is not None:
            where = workflow_registry.describe(definition)
            text = E702.format(name=name, where=where, problem=problem)
            errors.append(message("rivet.E702", text, E702_HINT, where))
    return errors
