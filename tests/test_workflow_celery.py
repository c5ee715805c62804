"""Real Celery workers on a real Redis run workflows, and survive kill -9.

The test process starts workflows and sends messages (tasks go to Redis after
commit); workers started from the project's Celery app run them against the
same test database. Nothing here asserts timing: the tests poll the database
with generous deadlines.
"""

import time

import pytest
import redis

from django_rivet import workflows
from django_rivet.models import Workflow
from tests.servers import celery_broker, celery_worker, kill9, server_env
from tests.testapp.models import StepRow

pytestmark = [pytest.mark.servers, pytest.mark.django_db(transaction=True)]


def wait_for(predicate, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} not met within {timeout}s")


@pytest.fixture
def broker(redis_url):
    """A clean Redis as this process's and the workers' broker."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    with celery_broker(redis_url):
        yield client
    client.close()


@pytest.fixture
def env(redis_url):
    # Short leases and sweeps (tests/workflow_settings.py).
    return server_env(
        RIVET_TEST_REDIS_URL=redis_url,
        DJANGO_SETTINGS_MODULE="tests.workflow_settings",
    )


def waits_for_go(workflow_id):
    row = Workflow.objects.get(pk=workflow_id)
    return row.status == "sleeping" and row.waiting_for == ["go"]


def test_a_worker_runs_a_sleep_and_a_message_wait_to_completion(broker, env):
    with celery_worker(env):  # no beat: only the ETA task wakes the sleep
        handle = workflows.start("sleepThenApprove", {"seconds": 2}, id="celery-1")
        wait_for(lambda: waits_for_go("celery-1"), what="the sleep, then the wait")
        history = handle.history()
        assert [(e.kind, e.status) for e in history] == [
            ("sleep", "completed"),
            ("message", "pending"),
        ]
        handle.send("go", {"by": "ann"})
        assert handle.result(timeout=60) == {"go": {"by": "ann"}}
    row = Workflow.objects.get(pk="celery-1")
    assert row.lease_token == "" and row.run_count >= 3


def test_a_killed_worker_s_workflow_finishes_elsewhere_with_each_transactional_row_once(
    broker, env
):
    with celery_worker(env, name="doomed") as doomed:
        handle = workflows.start("rowWriter", {"steps": 20, "delay": 0.25}, id="killed")
        wait_for(
            lambda: StepRow.objects.filter(workflow_id="killed").count() >= 6,
            what="a third of the steps",
        )
        kill9(doomed)  # mid-step, maybe mid-transaction
    assert handle.status == "running"  # its lease outlives the worker
    assert StepRow.objects.filter(workflow_id="killed").count() < 20
    with celery_worker(env, beat=True, name="rescuer"):
        # The sweeper sees the lease expire and sends the workflow to a worker,
        # which resumes it by replay.
        assert handle.result(timeout=90) == 20
    counts = {}
    for step, transactional in StepRow.objects.filter(workflow_id="killed").values_list(
        "step", "transactional"
    ):
        counts[step] = counts.get(step, 0) + 1
        assert transactional == (int(step[1:]) % 2 == 0)
    assert sorted(counts, key=lambda step: int(step[1:])) == [
        f"s{index}" for index in range(20)
    ]
    once = {step: n for step, n in counts.items() if int(step[1:]) % 2 == 0}
    assert once == {f"s{index}": 1 for index in range(0, 20, 2)}
    assert Workflow.objects.get(pk="killed").run_count >= 2
