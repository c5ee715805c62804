"""Django's Tasks API on django-rivet: RivetTaskBackend (docs/tasks.md).

Plain tests: they run on both Django legs (``django.tasks`` on Django 6,
the backport on 5.2); ``test_task_backend_pg`` runs the ones whose
behaviour rests on the database again on PostgreSQL. Time is the virtual
clock; the worker is ``run_due`` / ``run_until_idle`` in this process.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.test import override_settings

from django_rivet import clock, workflows
from django_rivet.models import Workflow
from django_rivet.signals import work_failed
from django_rivet.task_backend import RivetTaskBackend
from django_rivet.testing import freeze_time, run_due, run_until_idle
from tests.tasks.compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    default_task_backend,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from tests.testapp import tasks_api
from tests.testapp.models import StepRow

pytestmark = pytest.mark.django_db(transaction=True)

LIMITED = {"RIVET": {"WORKFLOW_QUEUES": {"limited": {"concurrency": 1}}}}


@pytest.fixture(autouse=True)
def _calls():
    tasks_api.CALLS.clear()
    yield
    tasks_api.CALLS.clear()


@pytest.fixture
def signals():
    seen = []

    def receiver(signal):
        def record(sender, task_result, **kwargs):
            seen.append((signal, sender, task_result.id, task_result.status))

        return record

    receivers = {
        name: receiver(name)
        for name in ("enqueued", "started", "finished", "work_failed")
    }
    task_enqueued.connect(receivers["enqueued"])
    task_started.connect(receivers["started"])
    task_finished.connect(receivers["finished"])

    def failed(sender, kind, action, id, error, **kwargs):
        seen.append(("work_failed", kind, action, id, type(error).__name__))

    work_failed.connect(failed)
    yield seen
    task_enqueued.disconnect(receivers["enqueued"])
    task_started.disconnect(receivers["started"])
    task_finished.disconnect(receivers["finished"])
    work_failed.disconnect(failed)


def run(result):
    """Run the task's workflow here while it is due; refresh the result."""
    run_until_idle(result.id)
    result.refresh()
    return result


# -- Django's documented examples, unchanged -------------------------------------
def test_the_backend_is_the_configured_default():
    backend = task_backends["default"]
    assert isinstance(backend, RivetTaskBackend) and backend.alias == "default"
    assert default_task_backend.options == {"max_retries": 0}
    assert default_task_backend.supports_defer
    assert default_task_backend.supports_async_task
    assert default_task_backend.supports_get_result
    assert default_task_backend.supports_priority


def test_enqueue_then_a_worker_runs_it_and_refresh_reads_every_field():
    result = tasks_api.add.enqueue(2, b=3)
    assert result.status == TaskResultStatus.READY
    assert result.args == [2] and result.kwargs == {"b": 3}
    assert result.enqueued_at is not None and result.started_at is None
    assert result.worker_ids == [] and result.errors == []
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value
    assert tasks_api.CALLS == []  # nothing runs at enqueue
    run(result)
    assert tasks_api.CALLS == [("add", (2, 3))]
    assert result.status == TaskResultStatus.SUCCESSFUL and result.is_finished
    assert result.return_value == 5
    assert result.attempts == 1 and len(result.worker_ids) == 1
    assert result.enqueued_at <= result.started_at == result.last_attempted_at
    assert result.started_at <= result.finished_at
    again = tasks_api.add.get_result(result.id)
    assert again.return_value == 5 and again.task == tasks_api.add
    assert again.id == result.id == Workflow.objects.get(name="rivet.task").pk


async def test_aenqueue_and_arefresh_and_an_async_task_function():
    from django_rivet.testing import arun_until_idle

    result = await tasks_api.noop_async.aenqueue(1, two=3)
    assert await arun_until_idle(result.id) == "completed"
    await result.arefresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"args": [1], "kwargs": {"two": 3}}
    assert tasks_api.CALLS == [("noop_async", ((1,), {"two": 3}))]
    found = await tasks_api.noop_async.aget_result(result.id)
    assert found.return_value == result.return_value


def test_using_sets_priority_queue_and_run_after():
    with freeze_time() as frozen:
        later = frozen.datetime() + timedelta(minutes=5)
        result = tasks_api.email.using(priority=10, run_after=later).enqueue("x")
        assert result.task.priority == 10 and result.task.queue_name == "emails"
        assert result.task.run_after == later
        refreshed = tasks_api.email.get_result(result.id)
        assert refreshed.task.run_after == later
        assert refreshed.task.priority == 10


def test_takes_context_gives_the_result_id_and_the_attempt():
    result = run(tasks_api.get_task_id.enqueue())
    assert result.return_value == result.id
    assert run(tasks_api.flaky.enqueue(0)).return_value == 1


def test_get_result_of_an_unknown_id_raises_task_result_does_not_exist():
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("no-such-task")
    with pytest.raises(TaskResultDoesNotExist):
        tasks_api.add.get_result("no-such-task")
    workflows.start("greet", {"name": "ann"}, id="a-workflow")  # a workflow, not a task
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("a-workflow")


async def test_aget_result_of_an_unknown_id_raises_too():
    with pytest.raises(TaskResultDoesNotExist):
        await default_task_backend.aget_result("no-such-task")


def test_a_queue_not_in_queues_is_refused_as_django_specifies():
    with pytest.raises(InvalidTask, match="Queue 'elsewhere' is not valid"):
        tasks_api.add.using(queue_name="elsewhere").enqueue(1, 2)
    assert not Workflow.objects.exists()


def test_signals_fire_enqueued_started_finished(signals):
    result = run(tasks_api.add.enqueue(1, 1))
    backend = RivetTaskBackend
    assert signals == [
        ("enqueued", backend, result.id, TaskResultStatus.READY),
        ("started", backend, result.id, TaskResultStatus.RUNNING),
        ("finished", backend, result.id, TaskResultStatus.SUCCESSFUL),
    ]


# -- failures and retries -----------------------------------------------------------
def test_a_failure_records_the_exception_class_and_its_traceback(signals):
    result = run(tasks_api.failing.enqueue("once"))
    assert result.status == TaskResultStatus.FAILED and result.is_finished
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    [error] = result.errors
    assert error.exception_class is tasks_api.TaskBoom
    assert error.exception_class_path == "tests.testapp.tasks_api.TaskBoom"
    assert error.traceback.endswith("TaskBoom: This task failed: once\n")
    assert result.finished_at >= result.started_at >= result.enqueued_at
    assert [s[0] for s in signals] == ["enqueued", "started", "finished", "work_failed"]
    assert signals[-1] == ("work_failed", "task", "tests.testapp.tasks_api.failing",
                           result.id, "TaskBoom")  # fmt: skip


def test_system_exit_and_an_unstorable_return_value_fail_the_task_not_the_worker():
    exited = run(tasks_api.failing_system_exit.enqueue())
    assert exited.status == TaskResultStatus.FAILED
    assert exited.errors[0].exception_class is SystemExit
    assert "This task failed due to SystemExit" in exited.errors[0].traceback
    returned = run(tasks_api.complex_return_value.enqueue())
    assert returned.status == TaskResultStatus.FAILED
    assert returned.errors[0].exception_class is TypeError


def test_max_retries_2_runs_three_times_with_growing_delays_then_fails(signals):
    with override_settings(
        TASKS={
            "default": {
                "BACKEND": "django_rivet.task_backend.RivetTaskBackend",
                "OPTIONS": {"max_retries": 2},
            }
        },
        RIVET={"RETRY_BACKOFF_BASE": 10, "RETRY_BACKOFF_MAX": 600},
    ):
        with freeze_time() as frozen:
            result = tasks_api.failing.enqueue()
            statuses = []
            for _ in range(100):  # a worker polling every second
                run_due()
                result.refresh()
                statuses.append(result.status)
                if result.is_finished:
                    break
                frozen.advance(1)
    times = [at for name, at in tasks_api.CALLS if name == "failing"]
    assert len(times) == 3
    delays = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    assert delays[0] < delays[1]
    assert set(statuses[:-1]) == {TaskResultStatus.READY}  # between attempts
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 3 and len(result.worker_ids) == 3
    assert all(e.exception_class is tasks_api.TaskBoom for e in result.errors)
    assert result.last_attempted_at > result.started_at
    kinds = [s[0] for s in signals]
    assert kinds == ["enqueued", "started", "started", "started", "finished",
                     "work_failed"]  # fmt: skip


def test_the_context_attempt_counts_across_retries():
    with override_settings(
        TASKS={
            "default": {
                "BACKEND": "django_rivet.task_backend.RivetTaskBackend",
                "OPTIONS": {"max_retries": 3},
            }
        }
    ):
        with freeze_time() as frozen:
            result = tasks_api.flaky.enqueue(2)
            for _ in range(5):
                run(result)
                frozen.advance(600)
    assert [a for name, a in tasks_api.CALLS if name == "flaky"] == [1, 2, 3]
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 3 and len(result.errors) == 2
    assert result.attempts == 3


def test_recover_runs_a_failed_task_s_last_attempt_again(signals):
    result = run(tasks_api.fails_until_allowed.enqueue("k"))
    assert result.status == TaskResultStatus.FAILED
    StepRow.objects.create(workflow_id="k", step="allowed")
    assert workflows.get(result.id).recover()  # the admin's "Recover"
    run(result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "k"
    assert len(result.errors) == 1 and result.attempts == 1
    assert [s[0] for s in signals][-2:] == ["started", "finished"]


# -- transactions, delays, priority ---------------------------------------------------
def test_a_task_enqueued_in_a_rolled_back_atomic_never_runs():
    with pytest.raises(RuntimeError), transaction.atomic():
        result = tasks_api.mark.enqueue("rolled-back")
        raise RuntimeError("roll back")
    committed = None
    with transaction.atomic():
        committed = tasks_api.mark.enqueue("committed")
    assert run_due() == 1
    assert tasks_api.CALLS == [("mark", "committed")]
    assert list(StepRow.objects.values_list("workflow_id", flat=True)) == ["committed"]
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result.id)
    committed.refresh()
    assert committed.status == TaskResultStatus.SUCCESSFUL


def test_an_enqueue_failing_half_way_in_a_transaction_cannot_be_committed(
    monkeypatch,
):
    from django.db import DatabaseError, connection

    from django_rivet.models import sql

    dialect = sql.dialect(connection)
    statements = dialect.start_sql
    if len(statements([str(f.column) for f in Workflow._meta.concrete_fields])) < 2:
        pytest.skip("one statement here: nothing between its two inserts")

    def broken(columns):
        return [statements(columns)[0], "INSERT INTO no_such_table VALUES (%s, %s, %s)"]

    monkeypatch.setattr(dialect, "start_sql", broken)
    with pytest.raises(DatabaseError), transaction.atomic():
        with pytest.raises(DatabaseError):
            tasks_api.mark.enqueue("half")
        Workflow.objects.count()  # Django refuses: the transaction is broken
    assert not Workflow.objects.exists()


def test_run_after_holds_the_task_until_then_under_the_virtual_clock():
    with freeze_time() as frozen:
        at = frozen.datetime() + timedelta(minutes=5)
        result = tasks_api.add.using(run_after=at).enqueue(1, 2)
        assert run_due() == 0
        frozen.advance(299)
        assert run_due() == 0
        assert run(result).status == TaskResultStatus.READY
        frozen.advance(1)
        assert run_due() == 1
    result.refresh()
    assert result.return_value == 3 and result.started_at >= at


@pytest.mark.parametrize("queue", ["default", "limited"])
def test_priority_orders_starts_within_a_queue(queue):
    with override_settings(**LIMITED):
        with transaction.atomic():  # all waiting when the worker looks
            for label, priority in (
                ("low", -50), ("high", 100), ("mid", 0), ("top", 100)
            ):  # fmt: skip
                tasks_api.email.using(priority=priority, queue_name=queue).enqueue(
                    label
                )
        run_due()
    assert [label for name, label in tasks_api.CALLS] == ["high", "top", "mid", "low"]


def test_a_limited_queue_counts_a_delayed_task_only_once_it_is_due():
    with override_settings(**LIMITED), freeze_time() as frozen:
        later = tasks_api.email.using(
            queue_name="limited", run_after=frozen.datetime() + timedelta(seconds=60)
        ).enqueue("later")
        now = tasks_api.email.using(queue_name="limited").enqueue("now")
        assert Workflow.objects.get(pk=later.id).status == "queued"
        assert Workflow.objects.get(pk=now.id).status == "pending"  # admitted
        run_due()
        assert tasks_api.CALLS == [("email", "now")]
        frozen.advance(60)
        run_due()
    assert tasks_api.CALLS == [("email", "now"), ("email", "later")]


# -- workflows.start(run_after=...) ---------------------------------------------------
@pytest.mark.parametrize(
    "run_after",
    [60, timedelta(seconds=60), "datetime"],
    ids=["seconds", "timedelta", "datetime"],
)
def test_a_workflow_started_with_run_after_is_pending_until_then(run_after):
    with freeze_time() as frozen:
        if run_after == "datetime":
            run_after = frozen.datetime() + timedelta(seconds=60)
        handle = workflows.start("greet", {"name": "ann"}, run_after=run_after)
        row = Workflow.objects.get(pk=handle.workflow_id)
        assert row.status == "pending"
        assert clock.to_timestamp(row.wake_at) == pytest.approx(frozen.now() + 60)
        assert run_until_idle(handle) == "pending"
        frozen.advance(60)
        assert run_until_idle(handle) == "completed"


def test_run_after_refuses_a_naive_datetime_and_other_types():
    from datetime import datetime

    with pytest.raises(ValueError, match="aware"):
        workflows.start("greet", {"name": "ann"}, run_after=datetime(2030, 1, 1))
    with pytest.raises(TypeError):
        workflows.start("greet", {"name": "ann"}, run_after="soon")
    assert not Workflow.objects.exists()


def test_a_queued_workflow_with_run_after_waits_uncounted_then_is_admitted():
    with override_settings(**LIMITED), freeze_time() as frozen:
        handle = workflows.start(
            "greet", {"name": "ann"}, queue="limited", run_after=30
        )
        from django_rivet.workflows.queues import next_admission_at, queue_stats

        assert [s.depth for s in queue_stats() if s.name == "limited"] == [0]
        assert next_admission_at() == pytest.approx(frozen.now() + 30)
        assert run_until_idle(handle) == "queued"
        frozen.advance(30)
        assert run_until_idle(handle) == "completed"


def test_retention_purges_a_finished_task_s_result():
    from django_rivet.upkeep.retention import purge_pass

    with freeze_time() as frozen:
        result = run(tasks_api.add.enqueue(1, 2))
        frozen.advance(7 * 86400 + 1)  # WORKFLOW_RETENTION's default
        purge_pass(100)
    with pytest.raises(TaskResultDoesNotExist):
        result.refresh()
