"""Workflow queues (RIVET["WORKFLOW_QUEUES"]): concurrency, rate limit, priority, dedup.

Driven in-process under the virtual clock: ``run_due`` runs admission and
the admitted workflows, round after round; ``queues.admit`` is one
admission pass, as the runtime makes after a start or a finish commits.
"""

import json

import pytest
from django.test import Client, override_settings

from django_rivet import (
    Actor,
    UnknownWorkflowQueue,
    UserError,
    WorkflowDeduplicated,
    action,
    actors,
    workflows,
)
from django_rivet.exceptions import ERROR_CLASSES
from django_rivet.models import Workflow, WorkflowQueue, WorkflowStatus
from django_rivet.testing import (
    freeze_time,
    register_temporarily,
    run_due,
    run_until_idle,
)
from django_rivet.workflows import InvalidQueueArguments, WorkflowQueueFull, queues
from tests.support.clock import START

# pg: the PostgreSQL leg runs this module (queue admission in raw SQL, under locks).
pytestmark = [pytest.mark.pg, pytest.mark.django_db]

QUEUES = {
    "pair": {"concurrency": 2},
    "single": {"concurrency": 1},
    "slow": {"rate_limit": (2, 60.0)},
    "both": {"concurrency": 1, "rate_limit": (10, 60.0)},
    "open": {},
    "capped": {"max_queued": 1000},
}
settings = override_settings(RIVET={"WORKFLOW_QUEUES": QUEUES})


def statuses(*handles):
    rows = dict(
        Workflow.objects.filter(pk__in=[h.workflow_id for h in handles]).values_list(
            "pk", "status"
        )
    )
    return [rows[h.workflow_id] for h in handles]


def approve(handle):
    handle.send("approve", {"by": "ann"})
    assert run_until_idle(handle) == "completed"


@settings
def test_a_queued_workflow_is_queued_until_its_queue_starts_it():
    with freeze_time(START):
        handle = workflows.start("greet", {"name": "ann"}, queue="open")
        assert handle.status == WorkflowStatus.QUEUED
        row = Workflow.objects.get(pk=handle.workflow_id)
        assert (row.queue, row.wake_at, row.started_at) == ("open", None, None)
        assert handle.wake() is False  # no way around the queue
        assert handle.status == WorkflowStatus.QUEUED
        assert run_due() == 2  # admitted, then run
    assert handle.result(timeout=1) == "hello ann"
    assert Workflow.objects.get(pk=handle.workflow_id).started_at == START


@settings
def test_at_most_concurrency_workflows_of_a_queue_are_started_and_not_finished():
    with freeze_time(START):
        handles = [
            workflows.start("approval", {}, id=f"c{n}", queue="pair") for n in range(5)
        ]
        run_due()
        # Two started and wait for their message (a waiting workflow keeps
        # its slot); three wait in the queue.
        assert statuses(*handles) == ["sleeping"] * 2 + ["queued"] * 3
        assert run_due() == 0
        approve(handles[0])
        run_due()
        assert (
            statuses(*handles) == ["completed", "sleeping", "sleeping"] + ["queued"] * 2
        )
        handles[1].cancel()  # a cancelled workflow frees its slot too
        run_due()
        assert statuses(*handles)[3:] == ["sleeping", "queued"]


@settings
def test_resuming_queued_workflows():
    """DBOS test_resuming_queued_workflows: resume() starts a queued one now.

    It runs outside its queue's limits (the one slot is held); the others
    wait for the slot as before.
    """
    with freeze_time(START):
        holder = workflows.start("approval", {}, id="holder", queue="single")
        first = workflows.start("greet", {"name": "1"}, id="regular-1", queue="single")
        second = workflows.start("greet", {"name": "2"}, id="regular-2", queue="single")
        assert run_until_idle(holder) == "sleeping"
        assert statuses(first, second) == ["queued", "queued"]
        assert first.resume() is True
        assert first.status == WorkflowStatus.PENDING
        assert run_until_idle(first) == "completed"
        assert second.status == WorkflowStatus.QUEUED
        assert first.resume() is False  # completed: nothing to resume
        approve(holder)
        run_due()
        assert statuses(holder, first, second) == ["completed"] * 3
    assert first.result() == "hello 1" and second.result() == "hello 2"


@settings
def test_a_rate_limited_queue_starts_at_most_n_per_window():
    with freeze_time(START) as clock:
        handles = [
            workflows.start("greet", {"name": str(n)}, queue="slow") for n in range(5)
        ]
        run_due()
        assert statuses(*handles).count("completed") == 2
        clock.advance(59.9)
        assert run_due() == 0
        # The worker loop knows when to look again.
        assert queues.next_admission_at() == pytest.approx(START.timestamp() + 60)
        clock.advance(0.1)
        run_due()
        assert statuses(*handles).count("completed") == 4
        clock.advance(60)
        run_due()
        assert statuses(*handles).count("completed") == 5
    started = sorted(
        Workflow.objects.values_list("started_at", flat=True), key=lambda t: t
    )
    assert [(t - START).total_seconds() for t in started] == [0, 0, 60, 60, 120]


@settings
def test_a_queue_held_by_its_concurrency_gives_the_worker_loop_no_time_to_wake():
    with freeze_time(START):
        handles = [workflows.start("approval", {}, queue="both") for _ in range(2)]
        run_due()
        assert sorted(statuses(*handles)) == ["queued", "sleeping"]
        # Its rate window has room: only a finish can start the next one.
        assert queues.next_admission_at() is None


@pytest.mark.django_db(transaction=True)  # each start's admission runs on commit
@settings
def test_a_full_rate_window_sends_one_wake_up_for_when_it_reopens(
    recording_dispatch,
):
    with freeze_time(START) as clock:
        for n in range(5):
            workflows.start("greet", {"name": str(n)}, queue="slow")
            clock.advance(1)
        for _ in range(3):
            queues.admit("slow")  # each start's pass, and more
    wakes = [(job, args, eta) for job, args, eta in recording_dispatch.sent]
    assert [w for w in wakes if w[0] == "admit_workflows"] == [
        # The second newest start (at 0 s) leaves the window at 60 s.
        ("admit_workflows", ["slow"], START.timestamp() + 60)
    ]


@settings
def test_lower_priority_numbers_start_first_then_the_oldest():
    with freeze_time(START) as clock:
        order = [("a", 5), ("b", 1), ("c", 1), ("d", 0), ("e", 5)]
        handles = {}
        for name, priority in order:
            handles[name] = workflows.start(
                "greet", {"name": name}, id=name, queue="single", priority=priority
            )
            clock.advance(1)
        started = []
        for _ in order:
            assert queues.admit("single") == 1
            (pending,) = Workflow.objects.filter(status=WorkflowStatus.PENDING)
            started.append(pending.pk)
            assert queues.admit("single") == 0  # the one slot is taken
            assert run_until_idle(handles[pending.pk]) == "completed"
    assert started == ["d", "b", "c", "a", "e"]


@settings
def test_a_dedup_key_held_by_a_queued_or_running_workflow_is_refused():
    with freeze_time(START):
        first = workflows.start(
            "approval", {}, id="holder", queue="single", dedup_key="user-42"
        )
        with pytest.raises(WorkflowDeduplicated) as refused:
            workflows.start("greet", {"name": "x"}, queue="single", dedup_key="user-42")
        assert refused.value.qualified_code == "workflow/duplicate"
        # Server code learns the holder; what a client may see does not.
        assert refused.value.workflow_id == "holder"
        assert refused.value.metadata == {"queue": "single"}
        assert "holder" not in refused.value.message
        assert "user-42" not in refused.value.message
        assert Workflow.objects.count() == 1  # nothing stored
        # Starting the same id again is idempotent, not a duplicate.
        assert workflows.start("approval", {}, id="holder", queue="single") == first
        # Another queue, or another key, is not a duplicate.
        workflows.start("greet", {"name": "y"}, queue="open", dedup_key="user-42")
        workflows.start("greet", {"name": "z"}, queue="single", dedup_key="user-43")
        run_due()
        assert first.status == WorkflowStatus.SLEEPING  # running, still holds it
        with pytest.raises(WorkflowDeduplicated):
            workflows.start("greet", {"name": "x"}, queue="single", dedup_key="user-42")
        approve(first)
        # Finished: the key is free again.
        again = workflows.start(
            "greet", {"name": "x"}, queue="single", dedup_key="user-42"
        )
        assert again.status == WorkflowStatus.QUEUED
    assert ERROR_CLASSES[("workflow", "duplicate")] is WorkflowDeduplicated


@settings
def test_bad_queue_arguments_are_refused_and_store_nothing():
    """DBOS test_enqueue_on_nonexistent_queue, deliberately different.

    DBOS records a workflow enqueued on an undeclared queue and runs it once
    the queue is registered; here queues are settings checked at start-up,
    so an unknown name is refused at once (docs/workflows.md, "Coming from
    DBOS").
    """
    with pytest.raises(UnknownWorkflowQueue) as unknown:
        workflows.start("greet", {"name": "x"}, queue="nope")
    assert unknown.value.qualified_code == "workflow/unknown_queue"
    assert unknown.value.metadata == {"queue": "nope"}
    for kwargs in (
        {"priority": 1},  # no queue
        {"dedup_key": "k"},
        {"queue": "open", "priority": "1"},
        {"queue": "open", "priority": 2**31},
        {"queue": "open", "priority": -(2**63)},
        {"queue": "open", "dedup_key": ""},
        {"queue": "open", "dedup_key": "x" * 256},
        {"queue": "open", "dedup_key": "a\x00b"},
    ):
        with pytest.raises(InvalidQueueArguments) as invalid:
            workflows.start("greet", {"name": "x"}, **kwargs)
        assert invalid.value.qualified_code == "workflow/invalid_queue_args"
        assert invalid.value.http_status == 400
        # What these raised before they had a code.
        assert isinstance(invalid.value, ValueError | TypeError)
    assert not Workflow.objects.exists()


class Signup(Actor):
    """Starts a queued workflow with what the client sends."""

    name = "signup"

    @action
    def join(self, ctx, key, priority=0):
        handle = ctx.workflows.start(
            "approval", {}, queue="single", dedup_key=key, priority=priority
        )
        return handle.workflow_id


def _post_join(client, *args):
    response = client.post(
        "/rivet/actors/signup/actions/join",
        json.dumps({"args": list(args)}),
        content_type="application/json",
    )
    return response.status_code, response.json()


@settings
@pytest.mark.django_db(transaction=True)
def test_clients_learn_nothing_of_another_callers_workflow_and_get_coded_400s():
    client = Client()
    with register_temporarily(Signup):
        status, first = _post_join(client, "user-42")
        assert status == 200
        # Another caller choosing the same key: refused, without the
        # holder's id or the key it holds.
        status, body = _post_join(client, "user-42")
        assert (status, body["group"], body["code"]) == (409, "workflow", "duplicate")
        assert body["metadata"] == {"queue": "single"}
        assert first["output"] not in json.dumps(body)
        assert "user-42" not in json.dumps(body)
        # Out-of-range arguments are the caller's mistake, not a 500.
        for args in (["x" * 300], ["ok", 2**40], ["a\x00b"], ["", 0]):
            status, body = _post_join(client, *args)
            assert status == 400, body
            assert body["code"] == "invalid_queue_args"
            assert "Traceback" not in json.dumps(body)


@settings
def test_a_queue_holds_at_most_max_queued_workflows():
    bounded = {**QUEUES, "bounded": {"concurrency": 1, "max_queued": 2}}
    with override_settings(RIVET={"WORKFLOW_QUEUES": bounded}), freeze_time(START):
        running = workflows.start("approval", {}, queue="bounded")
        run_due()  # admitted: it no longer waits
        waiting = [workflows.start("approval", {}, queue="bounded") for _ in range(2)]
        with pytest.raises(WorkflowQueueFull) as full:
            workflows.start("approval", {}, queue="bounded")
        assert full.value.qualified_code == "workflow/queue_full"
        assert full.value.http_status == 429
        assert full.value.metadata == {"queue": "bounded", "limit": 2}
        assert Workflow.objects.filter(queue="bounded").count() == 3
        # Starting an id again is not another workflow.
        assert workflows.start(
            "approval", {}, id=waiting[0].workflow_id, queue="bounded"
        )
        # Once one starts, there is room again.
        approve(running)
        run_due()
        workflows.start("approval", {}, queue="bounded")
    assert ERROR_CLASSES[("workflow", "queue_full")] is WorkflowQueueFull


@settings
def test_an_actor_starts_a_queued_workflow_in_its_transaction():
    class Starter(Actor):
        name = "starter"

        @action
        def go(self, ctx, fail: bool):
            handle = ctx.workflows.start(
                "greet", {"name": "from actor"}, queue="open", dedup_key="k"
            )
            if fail:
                raise UserError("rolled back", code="refused")
            return handle.workflow_id

    with register_temporarily(Starter):
        starter = actors.get_or_create("starter")
        with pytest.raises(UserError):
            starter.call("go", True)
        assert not Workflow.objects.exists()
        workflow_id = starter.call("go", False)
    assert Workflow.objects.get(pk=workflow_id).status == WorkflowStatus.QUEUED
    run_due()
    assert workflows.get(workflow_id).result(timeout=1) == "hello from actor"


@settings
def test_queue_stats_show_depth_running_and_oldest_wait():
    with freeze_time(START) as clock:
        handles = [workflows.start("approval", {}, queue="pair") for _ in range(3)]
        clock.advance(5)
        workflows.start("greet", {"name": "n"}, queue="single")
        queues.admit("pair")
        stats = {s.name: s for s in queues.queue_stats()}
    assert set(stats) == set(QUEUES)
    assert (stats["pair"].depth, stats["pair"].running) == (1, 2)
    assert stats["pair"].oldest_queued_at == START
    assert stats["pair"].config.concurrency == 2
    assert (stats["single"].depth, stats["single"].running) == (1, 0)
    assert (stats["open"].depth, stats["open"].running) == (0, 0)
    assert stats["open"].oldest_queued_at is None
    assert WorkflowQueue.objects.filter(name="pair").exists()
    assert len(handles) == 3


def test_workflows_of_a_queue_no_longer_configured_wait(caplog):
    queues._warned.discard("gone")  # warned once per process
    with override_settings(RIVET={"WORKFLOW_QUEUES": {"gone": {}}}):
        handle = workflows.start("greet", {"name": "x"}, queue="gone")
    assert run_due() == 0
    assert handle.status == WorkflowStatus.QUEUED
    assert "not configured queue=gone" in caplog.text
    assert handle.cancel() is True
    assert handle.status == WorkflowStatus.CANCELLED


@pytest.mark.django_db(transaction=True)
@settings
def test_admission_runs_after_the_start_commits_and_after_a_finish():
    first = workflows.start("approval", {}, id="t1", queue="single")
    second = workflows.start("greet", {"name": "t2"}, id="t2", queue="single")
    # No run_due: the start's commit admitted the first one.
    assert statuses(first, second) == ["pending", "queued"]
    assert run_until_idle(first) == "sleeping"
    approve(first)
    # Its finish freed the slot: the second one was admitted at once.
    assert second.status == WorkflowStatus.PENDING
    assert run_until_idle(second) == "completed"


# -- rivet.E701 ------------------------------------------------------------------------
def rivet_errors(rivet):
    from django.core import checks

    with override_settings(RIVET=rivet):
        return [m for m in checks.run_checks() if m.id and m.id.startswith("rivet.")]


@pytest.mark.parametrize(
    ("queues", "problem"),
    [
        (["emails"], "is not a dict of queue names to their limits"),
        ({"": {}}, "has a queue name '' that is not 1 to 128 characters"),
        ({"e": 5}, "entry 'e' is not a dict of limits"),
        ({"e": {"limit": 5}}, "entry 'e' has unknown options ['limit']"),
        (
            {"e": {"concurrency": 0}},
            "entry 'e': concurrency must be a positive integer",
        ),
        (
            {"e": {"max_queued": -1}},
            "entry 'e': max_queued must be a positive integer",
        ),
        (
            {"e": {"rate_limit": 100}},
            "entry 'e': rate_limit must be (starts, seconds), both positive",
        ),
        (
            {"e": {"rate_limit": (10, 0)}},
            "entry 'e': rate_limit must be (starts, seconds), both positive",
        ),
        # DBOS test_partition_limit_validation: limits that could never bind.
        (
            {"e": {"partition_concurrency": 0}},
            "entry 'e': partition_concurrency must be a positive integer",
        ),
        (
            {"e": {"worker_concurrency": 0}},
            "entry 'e': worker_concurrency must be a positive integer",
        ),
        (
            {"e": {"partition_rate_limit": (1,)}},
            "entry 'e': partition_rate_limit must be (starts, seconds), both positive",
        ),
    ],
)
def test_a_malformed_workflow_queues_setting_is_e701(queues, problem):
    from django_rivet import checks as rivet_checks

    (error,) = rivet_errors({"WORKFLOW_QUEUES": queues})
    assert error.id == "rivet.E701"
    assert error.msg == rivet_checks.E701.format(problem=problem)


def test_well_formed_queues_pass_the_check():
    assert rivet_errors({"WORKFLOW_QUEUES": QUEUES}) == []
