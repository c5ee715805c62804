"""Finding workflows and reading what they hold (issue 44).

``workflows.filter``/``count`` with DBOS's filters, attributes, and the
handle's ``get_events()`` and ``messages()``. The tests named after DBOS
Transact's (tests/test_workflow_introspection.py, test_attributes.py,
test_workflow_management.py) are translations of them.
"""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_rivet import WorkflowNotFound, workflows
from django_rivet.models import Workflow
from django_rivet.testing import freeze_time, run_due, run_until_idle
from tests.support.clock import START

T0 = START.timestamp()  # the same instant, in epoch seconds

# pg: the PostgreSQL leg runs this module (prefixes, JSON waits, the attribute
# subqueries in each database's SQL).
pytestmark = [pytest.mark.pg, pytest.mark.django_db]


def ids(**filters):
    filters.setdefault("limit", None)
    return [h.workflow_id for h in workflows.filter(**filters)]


def test_list_workflow():
    """DBOS test_list_workflow: by status, by names, by ids (one or lists)."""
    handle = workflows.start("greet", {"name": "ann"}, id="listed")
    run_until_idle(handle)
    assert ids(status="pending") == []
    assert ids(status="completed") == ["listed"]
    assert ids(status=["completed", "pending"]) == ["listed"]
    assert ids(name="no") == []
    assert ids(name="greet") == ["listed"]
    assert ids(name=["greet", "no"]) == ["listed"]
    assert ids(name=["no", "also_no"]) == []
    assert ids(ids=["no"]) == []
    assert ids(ids=["listed", "no"]) == ["listed"]
    assert workflows.count(ids=["listed", "no"], name=["greet"]) == 1


def test_list_workflow_limit():
    """DBOS test_list_workflow_limit: order, limit and offset."""
    with freeze_time(START) as clock:
        for index in range(5):
            workflows.start("greet", {"name": str(index)}, id=str(index))
            clock.advance(1)
    assert ids(order="asc") == ["0", "1", "2", "3", "4"]
    assert ids() == ["4", "3", "2", "1", "0"]  # newest first, by default
    assert ids(order="asc", limit=2) == ["0", "1"]
    assert ids(order="asc", limit=2, offset=2) == ["2", "3"]
    assert ids(order="asc", offset=4) == ["4"]
    with pytest.raises(ValueError):
        workflows.filter(order="sideways")
    with pytest.raises(ValueError):
        workflows.filter(offset=-1)


def test_list_workflow_start_end_times():
    """DBOS test_list_workflow_start_end_times (``start_time``/``end_time``)."""
    with freeze_time(START) as clock:
        workflows.start("greet", {"name": "x"}, id="timed")
        clock.advance(10)
    assert ids(created_after=T0 - 20, created_before=T0 + 5) == ["timed"]
    assert ids(created_after=T0 - 30, created_before=T0 - 20) == []


def test_list_workflow_prefix():
    """DBOS test_list_workflow_prefix: one prefix or several."""
    for workflow_id in ("test1", "test_"):
        workflows.start("greet", {"name": "x"}, id=workflow_id)
    assert ids(id_prefix="invalid") == []
    assert sorted(ids(id_prefix="test")) == ["test1", "test_"]
    assert ids(id_prefix="test_") == ["test_"]  # "_" is no wildcard here
    assert ids(id_prefix="test1") == ["test1"]
    assert sorted(ids(id_prefix=["test1", "test_"])) == ["test1", "test_"]
    assert ids(id_prefix=["test1", "invalid"]) == ["test1"]
    assert ids(id_prefix=["invalid", "also_invalid"]) == []


def test_list_workflow_completed_at():
    """DBOS test_list_workflow_completed_at: finished ones, in their window."""
    with freeze_time(START) as clock:
        done = workflows.start("greet", {"name": "x"}, id="done")
        assert run_until_idle(done) == "completed"
        clock.advance(10)
        broken = workflows.start("recoverable", {}, id="broken")
        assert run_until_idle(broken) == "failed"
        clock.advance(10)
        stopped = workflows.start("approval", {}, id="stopped")
        stopped.cancel()
        assert Workflow.objects.get(pk="stopped").finished_at is not None
        stopped.resume()  # running again: not finished any more
        assert Workflow.objects.get(pk="stopped").finished_at is None
    assert ids(completed_after=T0 - 1, completed_before=T0 + 1) == ["done"]
    assert ids(completed_after=T0 - 1) == ["broken", "done"]
    assert ids(completed_before=T0 - 86400) == []
    assert workflows.count(completed_after=T0 - 1) == 2


def test_list_workflows_by_parent_and_has_parent():
    """DBOS test_list_workflows_by_parent and test_list_workflows_has_parent."""
    parent = workflows.start("family", {}, id="fam")
    run_until_idle(parent)
    workflows.start("greet", {"name": "x"}, id="standalone")
    children = ["fam/audit", "fam/helper", "fam/refunder"]
    assert sorted(ids(parent_id="fam")) == children
    assert ids(parent_id="nonexistent") == []
    assert sorted(ids(has_parent=True)) == children
    assert sorted(ids(has_parent=False)) == ["fam", "standalone"]
    assert workflows.count() == 5


@override_settings(RIVET={"WORKFLOW_QUEUES": {"open": {}}})
def test_filter_by_queue_and_the_filters_compose():
    with freeze_time(START):
        queued = workflows.start("greet", {"name": "q"}, id="queued", queue="open")
        workflows.start("greet", {"name": "d"}, id="direct")
        assert ids(queue="open") == ["queued"]
        assert ids(queue="open", status="queued") == ["queued"]
        assert ids(queue="open", status="completed") == []
        run_due()
    assert queued.status == "completed"
    with pytest.raises(TypeError, match="Unknown workflow filter 'tenant'"):
        workflows.filter(tenant="42")
    with pytest.raises(ValueError, match="Unknown workflow status"):
        workflows.count(status="done")


def test_attributes_list_filter():
    """DBOS test_attributes_list_filter, for strings and integers.

    DBOS stores any JSON value; here attributes are strings and integers
    (an indexed equality on both databases), so booleans, None and maps
    are refused when the workflow starts.
    """
    acme = workflows.start(
        "greet", {"name": "a"}, attributes={"customer": "acme", "tier": 1}
    )
    bigco = workflows.start(
        "greet", {"name": "b"}, attributes={"customer": "bigco", "tier": 2}
    )
    assert ids(attributes={"customer": "acme"}) == [acme.workflow_id]
    assert ids(attributes={"customer": "bigco", "tier": 2}) == [bigco.workflow_id]
    assert ids(attributes={"customer": "acme", "tier": 2}) == []
    assert ids(attributes={"tier": 1}) == [acme.workflow_id]
    assert ids(attributes={"tier": "1"}) == []  # an integer is not its text
    assert ids(attributes={"tier": 1}, ids=[bigco.workflow_id]) == []
    assert ids(attributes={"missing": "key"}) == []
    assert acme.attributes == {"customer": "acme", "tier": 1}
    assert workflows.get(bigco.workflow_id).attributes == {
        "customer": "bigco",
        "tier": 2,
    }
    plain = workflows.start("greet", {"name": "c"})
    assert plain.attributes == {}


@pytest.mark.parametrize(
    ("attributes", "error"),
    [
        ({"beta": True}, TypeError),
        ({"note": None}, TypeError),
        ({"meta": {"region": "us-east-1"}}, TypeError),
        ({"": "empty key"}, ValueError),
        ({"k" * 65: "long key"}, ValueError),
        ({"long": "v" * 256}, ValueError),
        ({"big": 2**63}, ValueError),
        ({f"k{n}": n for n in range(33)}, ValueError),
    ],
)
def test_attributes_that_cannot_be_searched_are_refused_and_store_nothing(
    attributes, error
):
    with pytest.raises(error):
        workflows.start("greet", {"name": "x"}, attributes=attributes)
    assert not Workflow.objects.exists()


def test_attributes_are_a_new_workflow_s_own_and_children_do_not_inherit_them():
    """DBOS test_attributes_direct_invocation: a child has none of its parent's."""
    parent = workflows.start("waitsForChild", {}, id="attr-parent", attributes={"t": 1})
    again = workflows.start("waitsForChild", {}, id="attr-parent", attributes={"t": 2})
    assert again.attributes == {"t": 1}  # the existing id keeps its own
    run_until_idle(parent)
    assert workflows.get("attr-parent/nap").attributes == {}


def test_get_all_events():
    """DBOS test_get_all_events: every key's latest value."""
    handle = workflows.start("publisher", {}, id="events")
    assert handle.get_events() == {}
    run_until_idle(handle)
    assert handle.get_events() == {"progress": {"done": 1}}
    handle.send("next")
    run_until_idle(handle)
    assert handle.get_events() == {"progress": {"done": 2}}
    # Deliberately unlike DBOS (an empty mapping): an unknown id is not found.
    with pytest.raises(WorkflowNotFound):
        workflows.WorkflowHandle("nonexistent", "publisher").get_events()


def test_get_all_notifications():
    """DBOS test_get_all_notifications, for the unread ones.

    DBOS lists every message with a ``consumed`` flag; a received message
    leaves the inbox here, so ``messages()`` lists the ones not received
    yet (what was received is in the history).
    """
    with freeze_time(START):
        handle = workflows.start("approval", {}, id="inbox")
        handle.send("note", "unconsumed")
        handle.send("approve", {"by": "ann"})
        assert [(m.name, m.body) for m in handle.messages()] == [
            ("note", "unconsumed"),
            ("approve", {"by": "ann"}),
        ]
        assert run_until_idle(handle) == "completed"
    unread = handle.messages()
    assert [(m.name, m.body, m.created_at) for m in unread] == [
        ("note", "unconsumed", T0)
    ]
    with pytest.raises(WorkflowNotFound):
        workflows.WorkflowHandle("nonexistent", "approval").messages()


@pytest.mark.django_db(transaction=True)
async def test_the_reads_have_async_twins():
    handle = await workflows.astart("greet", {"name": "x"}, attributes={"a": "b"})
    assert await handle.aattributes() == {"a": "b"}
    assert await handle.aget_events() == {}
    assert await handle.amessages() == []
    assert await workflows.acount(attributes={"a": "b"}) == 1
    found = await workflows.afilter(attributes={"a": "b"}, order="asc", offset=0)
    assert found == [handle]
