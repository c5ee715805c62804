"""System checks of the TASKS entries naming RivetTaskBackend (rivet.E901, E902)."""

from __future__ import annotations

from unittest import mock

import pytest
from django.test import override_settings

from django_rivet.checks import tasks as task_checks
from django_rivet.task_backend import RivetTaskBackend, compat

BACKEND = "django_rivet.task_backend.RivetTaskBackend"


def entry_problems(**entry):
    backend = RivetTaskBackend("jobs", {"BACKEND": BACKEND, **entry})
    return [(m.id, m.msg) for m in backend.check()]


def test_a_valid_entry_has_no_problem():
    assert (
        entry_problems(QUEUES=["default", "emails"], OPTIONS={"max_retries": 3}) == []
    )
    assert entry_problems() == []


def test_unknown_options_bad_retries_and_bad_queue_names_are_e901():
    found = entry_problems(
        QUEUES=["ok", "x" * 129], OPTIONS={"max_retries": -1, "retry": 2}
    )
    assert [id for id, _ in found] == ["rivet.E901"] * 3
    assert found[0][1] == task_checks.E901.format(
        alias="jobs",
        problem=f"has a queue name {'x' * 129!r} that is not 1 to 128 characters",
    )
    assert "unknown option 'retry'" in found[1][1]
    assert "OPTIONS['max_retries'] -1" in found[2][1]


@pytest.mark.django_db
def test_django_s_tasks_checks_run_the_backend_s_check():
    from django.core import checks

    with override_settings(
        TASKS={"default": {"BACKEND": BACKEND, "OPTIONS": {"max_retries": "3"}}}
    ):
        ids = [m.id for m in checks.run_checks()]
    assert ids.count("rivet.E901") == 1  # reported once, by one of the two


def test_a_missing_tasks_framework_is_e902():
    with (
        override_settings(TASKS={"jobs": {"BACKEND": BACKEND}}),
        mock.patch.object(compat, "AVAILABLE", False),
    ):
        found = task_checks.check_tasks()
    assert [(m.id, m.msg) for m in found] == [
        ("rivet.E902", task_checks.E902.format(alias="jobs"))
    ]
