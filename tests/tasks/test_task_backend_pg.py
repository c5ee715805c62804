"""The task backend's behaviours that rest on the database, on PostgreSQL too.

The same tests as ``test_task_backend`` (which the Django 6 leg runs on
SQLite), collected again here with the ``pg`` mark: the PostgreSQL leg runs
them on its database.
"""

import pytest

from tests.tasks.test_task_backend import (  # noqa: F401
    _calls,
    signals,
    test_a_failure_records_the_exception_class_and_its_traceback,
    test_a_limited_queue_counts_a_delayed_task_only_once_it_is_due,
    test_a_queued_workflow_with_run_after_waits_uncounted_then_is_admitted,
    test_a_task_enqueued_in_a_rolled_back_atomic_never_runs,
    test_a_workflow_started_with_run_after_is_pending_until_then,
    test_aenqueue_and_arefresh_and_an_async_task_function,
    test_enqueue_then_a_worker_runs_it_and_refresh_reads_every_field,
    test_get_result_of_an_unknown_id_raises_task_result_does_not_exist,
    test_max_retries_2_runs_three_times_with_growing_delays_then_fails,
    test_priority_orders_starts_within_a_queue,
    test_recover_runs_a_failed_task_s_last_attempt_again,
    test_run_after_holds_the_task_until_then_under_the_virtual_clock,
)

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]
