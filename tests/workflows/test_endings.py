"""The ``workflow_finished`` signal: once per end, after the commit (issue 44)."""

from __future__ import annotations

import logging

import pytest

from django_rivet import workflows
from django_rivet.signals import workflow_finished
from django_rivet.testing import freeze_time, run_due, run_until_idle
from django_rivet.workflows import leases, registry
from django_rivet.workflows.leases import Lease
from tests.testapp.models import StepRow

# pg: the PostgreSQL leg runs this module (the signal follows commits).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def ends():
    """The signals sent: (workflow_id, name, status, error, sender)."""
    sent = []

    def receive(sender, workflow_id, name, status, error, **kwargs):
        sent.append((workflow_id, name, status, error, sender))

    workflow_finished.connect(receive, dispatch_uid="test-ends")
    yield sent
    workflow_finished.disconnect(dispatch_uid="test-ends")


def test_a_completed_workflow_sends_it_once_with_no_error(ends):
    handle = workflows.start("greet", {"name": "ann"}, id="done")
    assert ends == []
    assert run_until_idle(handle) == "completed"
    run_until_idle(handle)
    assert ends == [("done", "greet", "completed", None, registry.get("greet"))]


def test_a_failed_workflow_sends_its_error_and_again_after_a_recover(ends):
    handle = workflows.start("recoverable", {}, id="broken")
    assert run_until_idle(handle) == "failed"
    assert [(e[0], e[2], e[3]["name"]) for e in ends] == [
        ("broken", "failed", "CriticalError")
    ]
    assert handle.recover() is True
    assert run_until_idle(handle) == "failed"  # ends again: sent again
    assert [e[2] for e in ends] == ["failed", "failed"]


def test_a_cancel_sends_it_at_once_and_the_rollbacks_send_nothing_more(ends):
    handle = workflows.start("rowWriter", {"steps": 1}, id="stop")
    lease = leases.claim("stop")  # a worker holds it
    assert isinstance(lease, Lease)
    assert handle.cancel() is True
    assert [(e[0], e[2], e[3]["metadata"]) for e in ends] == [
        ("stop", "cancelled", {"reason": "cancelled"})
    ]
    leases.release(lease, status="sleeping")  # the fenced-out run lets go
    assert run_until_idle(handle) == "cancelled"  # carries the cancel out
    assert len(ends) == 1


def test_a_deadline_and_a_parent_s_cancel_send_their_reasons(ends):
    with freeze_time() as frozen:
        late = workflows.start("deadlined", {}, id="late")
        run_until_idle(late)
        frozen.advance(300)
        assert run_until_idle(late) == "cancelled"
    parent = workflows.start("family", {}, id="fam")
    run_due()
    run_due()
    parent.cancel()
    run_due()
    reasons = {e[0]: e[3]["metadata"]["reason"] for e in ends}
    assert reasons == {
        "late": "timeout",
        "fam": "cancelled",
        "fam/helper": "parent_cancelled",
        "fam/refunder": "parent_cancelled",
    }
    assert StepRow.objects.filter(step="refund:ch_1").count() == 2


def test_a_receiver_that_raises_is_logged_and_changes_nothing(caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("receiver down")

    workflow_finished.connect(broken, dispatch_uid="test-broken")
    try:
        handle = workflows.start("greet", {"name": "bob"})
        with caplog.at_level(logging.ERROR, logger="django_rivet.workflows"):
            assert run_until_idle(handle) == "completed"
    finally:
        workflow_finished.disconnect(dispatch_uid="test-broken")
    assert handle.result() == "hello bob"
    assert "workflow_finished receiver" in caplog.text
    assert "receiver down" in caplog.text
