"""Partitioned workflow queues and per-process caps (issue 44).

Driven in-process under the virtual clock, like ``test_queues.py``; the
real-worker version (20 keys x 200 workflows on two Celery workers) is in
``test_celery.py``. The tests named after DBOS Transact's (tests/test_queue.py)
are translations of them.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connections
from django.test import override_settings

from django_rivet import PartitionKeyRequired, workflows
from django_rivet.models import Workflow, WorkflowStatus
from django_rivet.testing import freeze_time, run_due, run_until_idle
from django_rivet.workflows import capacity, execution, queues
from tests.support.clock import START

# pg: the PostgreSQL leg runs this module (per-partition counts and the
# round robin under the queue's lock).
pytestmark = [pytest.mark.pg, pytest.mark.django_db]

QUEUES = {
    "tenants": {"partition_concurrency": 1},
    "shared": {"concurrency": 2, "partition_concurrency": 1},
    "paced": {"partition_rate_limit": (2, 60.0)},
    "both": {"partition_concurrency": 2, "concurrency": 3},
    "plain": {"concurrency": 1},
    "capped": {"worker_concurrency": 1},
}
settings = override_settings(RIVET={"WORKFLOW_QUEUES": QUEUES})


def start(queue, key, workflow_id=None, name="approval"):
    return workflows.start(
        name, {"name": key}, workflow_id, queue=queue, partition_key=key
    )


def running_per_key(queue):
    found: dict[str, int] = {}
    rows = Workflow.objects.filter(queue=queue).exclude(status="queued")
    for key, status in rows.values_list("partition_key", "status"):
        if status in ("pending", "running", "sleeping", "rolling_back"):
            found[key] = found.get(key, 0) + 1
    return found


def approve_all(queue):
    for handle in workflows.filter(queue=queue, status="sleeping", limit=None):
        handle.send("approve", {"by": "ann"})


@settings
def test_queue_partitions():
    """DBOS test_queue_partitions: a busy partition does not hold another one."""
    with freeze_time(START):
        blocked = start("tenants", "blocked", "b1")
        behind = start("tenants", "blocked", "b2")
        run_due()
        assert (blocked.status, behind.status) == ("sleeping", "queued")
        other = start("tenants", "normal", "n1")
        run_due()
        assert other.status == "sleeping"  # started at once, beside "blocked"
        blocked.send("approve", {"by": "ann"})
        run_due()
        run_due()
        assert behind.status == "sleeping"  # its partition's turn came
    assert Workflow.objects.get(pk="b2").partition_key == "blocked"


@settings
def test_a_partitioned_queue_needs_a_key_and_a_plain_one_refuses_it():
    with pytest.raises(PartitionKeyRequired) as info:
        workflows.start("greet", {"name": "x"}, queue="tenants")
    assert info.value.qualified_code == "workflow/partition_key_required"
    assert isinstance(info.value, ValueError)
    with pytest.raises(ValueError, match="not partitioned"):
        workflows.start("greet", {"name": "x"}, queue="plain", partition_key="k")
    with pytest.raises(ValueError, match="need a queue"):
        workflows.start("greet", {"name": "x"}, partition_key="k")
    with pytest.raises(ValueError, match="partition_key is 1 to"):
        workflows.start("greet", {"name": "x"}, queue="tenants", partition_key="")
    assert not Workflow.objects.exists()


@settings
def test_partition_limits_bound_both_scopes():
    """DBOS test_partition_limits_bound_both_scopes: per key and over all keys."""
    with freeze_time(START):
        for key in ("p0", "p1", "p2", "p3"):
            for index in range(3):
                start("both", key, f"{key}-{index}")
        for _ in range(4):
            run_due()
            per_key = running_per_key("both")
            assert sum(per_key.values()) == 3  # the queue-wide limit binds
            assert max(per_key.values()) <= 2  # and each partition's
            approve_all("both")
        run_due()
        run_due()
        run_due()
    assert workflows.count(queue="both", status="completed") == 12


@settings
def test_partitioned_queue_does_not_starve_partitions():
    """DBOS test_partitioned_queue_does_not_starve_partitions.

    Two busy partitions (sorting first) hold 60 workflows each and four
    small ones one each, on a queue that runs two at a time: every small
    partition is served while the busy ones still hold most of their work.
    """
    with freeze_time(START):
        for key in ("aaa-busy-1", "aaa-busy-2"):
            for index in range(60):
                start("shared", key, f"{key}-{index}", name="greet")
        for index in range(4):
            start("shared", f"zzz-small-{index}", f"small-{index}", name="greet")
        rounds = 0
        while workflows.count(id_prefix="small-", status="completed") < 4:
            run_due(max_rounds=1)
            rounds += 1
            assert rounds < 20
        busy_done = workflows.count(id_prefix="aaa-busy", status="completed")
    assert busy_done < 120 // 2


@settings
def test_a_partition_rate_limit_holds_per_key():
    with freeze_time(START) as clock:
        for key in ("a", "b"):
            for index in range(3):
                start("paced", key, f"{key}{index}", name="greet")
        run_due()
        started = Workflow.objects.filter(queue="paced").exclude(status="queued")
        assert sorted(started.values_list("pk", flat=True)) == ["a0", "a1", "b0", "b1"]
        clock.advance(59)
        run_due()
        assert workflows.count(queue="paced", status="queued") == 2
        clock.advance(1)  # both windows reopen
        run_due()
        run_due()
    assert workflows.count(queue="paced", status="completed") == 6


@settings
def test_resuming_queued_partitioned_workflows():
    """DBOS test_resuming_queued_partitioned_workflows: outside the limits."""
    with freeze_time(START):
        holder = start("tenants", "key", "holder")
        first = start("tenants", "key", "r1", name="greet")
        second = start("tenants", "key", "r2", name="greet")
        run_due()
        assert (holder.status, first.status, second.status) == (
            "sleeping",
            "queued",
            "queued",
        )
        assert first.resume() is True
        assert run_until_idle(first) == "completed"
        assert second.status == "queued"
        holder.send("approve", {"by": "ann"})
        run_due()
        run_due()
    assert second.status == "completed"


@settings
@pytest.mark.django_db(transaction=True)
def test_one_at_a_time_with_worker_concurrency(tmp_path):
    """DBOS test_one_at_a_time_with_worker_concurrency, per process here.

    With ``worker_concurrency: 1`` this process runs one workflow of the
    queue at a time: a second run while the first holds its place does not
    claim the workflow and makes it due a moment later.
    """
    gate, entered = tmp_path / "gate", tmp_path / "entered"
    busy = workflows.start(
        "blockedBetweenSteps",
        {"gate": str(gate), "entered": str(entered)},
        "busy",
        queue="capped",
    )
    waiting = workflows.start("greet", {"name": "x"}, "waiting", queue="capped")
    assert (busy.status, waiting.status) == ("pending", "pending")  # admitted
    worker = threading.Thread(
        target=lambda: (execution.run("busy"), connections.close_all())
    )
    worker.start()
    try:
        while not entered.exists():
            worker.join(0.02)
        assert capacity.running("capped") == 1
        before = Workflow.objects.get(pk="waiting").wake_at
        assert execution.run("waiting") is None  # no room in this process
        after = Workflow.objects.get(pk="waiting")
        assert after.status == WorkflowStatus.PENDING and after.run_count == 0
        assert (after.wake_at - before).total_seconds() >= capacity.DEFER_SECONDS
    finally:
        gate.touch()
        worker.join(60)
    assert busy.status == "completed" and capacity.running("capped") == 0
    with freeze_time(after.wake_at):
        assert run_until_idle(waiting) == "completed"


def test_queue_config_reads_the_partition_and_process_limits():
    with override_settings(RIVET={"WORKFLOW_QUEUES": QUEUES}):
        found = queues.configured()
    assert found["shared"].partitioned and found["paced"].partitioned
    assert not found["plain"].partitioned and not found["capped"].partitioned
    assert found["paced"].partition_rate_limit == (2, 60.0)
    assert found["capped"].worker_concurrency == 1
