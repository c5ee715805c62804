"""The workflow side of the admin inspector: decoded, read-only, actions."""

import pytest
from django.urls import reverse

from django_rivet import workflows
from django_rivet.models import Workflow, WorkflowMessage
from django_rivet.testing import run_until_idle
from tests.support.admin import log_in_staff
from tests.testapp.models import StepRow

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "admin:django_rivet_workflow_changelist"


@pytest.fixture
def operator(client):
    return log_in_staff(client, "view_workflow", "change_workflow")


def act(client, action, *ids, **extra):
    data = {"action": action, "_selected_action": list(ids), **extra}
    return client.post(reverse(CHANGELIST), data, follow=True)


def test_staff_sees_the_workflow_decoded(viewer):
    handle = workflows.start("greet", {"name": "ann"}, id="shown")
    run_until_idle(handle)
    page = viewer.get(reverse("admin:django_rivet_workflow_change", args=["shown"]))
    html = page.content.decode()
    assert page.status_code == 200
    assert "&quot;name&quot;: &quot;Ann&quot;" in html.replace("ann", "Ann")
    assert "hello ann" in html  # the step output and the workflow output
    assert "<code>greet</code>" in html  # the history table
    listing = viewer.get(reverse(CHANGELIST)).content.decode()
    assert "shown" in listing and "completed" in listing


def test_a_workflow_s_streams_show_their_length_and_last_values(viewer):
    handle = workflows.start("streamer", {"count": 12}, id="streamed")
    run_until_idle(handle)
    page = viewer.get(reverse("admin:django_rivet_workflow_change", args=["streamed"]))
    html = page.content.decode().replace("&quot;", '"')
    assert '"key": "n"' in html and '"length": 12' in html
    assert '"closed": true' in html
    assert '"last 5 values": {\n' in html
    # By offset (from 1): the values 7..11 at offsets 8..12.
    assert '"12": 11' in html and '"8": 7' in html and '"7": 6' not in html


def test_failures_and_messages_are_shown(viewer):
    doomed = workflows.start("doomed", {}, id="doomed")
    run_until_idle(doomed)
    page = viewer.get(reverse("admin:django_rivet_workflow_change", args=["doomed"]))
    assert "no way" in page.content.decode()
    waiting = workflows.start("approval", {}, id="inbox")
    waiting.send("other", {"secret": "body"})
    message = WorkflowMessage.objects.get()
    url = reverse("admin:django_rivet_workflowmessage_change", args=[message.pk])
    assert "&quot;secret&quot;: &quot;body&quot;" in viewer.get(url).content.decode()


def test_workflow_records_are_read_only(operator):
    workflows.start("greet", {"name": "ann"}, id="ro")
    assert operator.get(reverse("admin:django_rivet_workflow_add")).status_code == 403
    url = reverse("admin:django_rivet_workflow_change", args=["ro"])
    operator.post(url, {"status": "completed"})
    assert Workflow.objects.get(pk="ro").status == "pending"
    delete = reverse("admin:django_rivet_workflow_delete", args=["ro"])
    assert operator.post(delete, {"post": "yes"}).status_code == 403


def test_viewers_get_no_actions(viewer):
    workflows.start("approval", {}, id="no-actions")
    page = viewer.get(reverse(CHANGELIST)).content.decode()
    assert "cancel_workflows" not in page
    act(viewer, "cancel_workflows", "no-actions")
    assert Workflow.objects.get(pk="no-actions").status == "pending"


def test_cancel_wake_and_recover_actions(operator):
    waiting = workflows.start("approval", {}, id="to-cancel")
    run_until_idle(waiting)
    response = act(operator, "cancel_workflows", "to-cancel")
    assert "Cancel: 1 workflow(s)." in response.content.decode()
    assert waiting.status == "cancelled"

    napper = workflows.start("napper", {"seconds": 600}, id="to-wake")
    run_until_idle(napper)
    act(operator, "wake_workflows", "to-wake")
    assert Workflow.objects.get(pk="to-wake").wake_at is not None

    failing = workflows.start("recoverable", {}, id="to-recover")
    run_until_idle(failing)
    StepRow.objects.create(workflow_id="to-recover", step="allow")
    act(operator, "recover_workflows", "to-recover")
    assert run_until_idle(failing) == "completed"
    response = act(operator, "recover_workflows", "to-recover")
    assert "Did not recover to-recover" in response.content.decode()


def test_replay_from_a_step_goes_through_a_form(operator):
    handle = workflows.start("rowWriter", {"steps": 3}, id="replayed")
    run_until_idle(handle)
    form = act(operator, "replay_workflow", "replayed")
    html = form.content.decode()
    assert "Replay from the chosen step" in html
    target = handle.history()[1]
    assert f'value="{target.id}"' in html
    response = act(
        operator, "replay_workflow", "replayed", apply="1", entry_id=target.id
    )
    assert "Replaying replayed from step" in response.content.decode()
    assert [entry.location for entry in handle.history()] == ["s0"]
    assert run_until_idle(handle) == "completed"
    assert StepRow.objects.filter(step="s1").count() == 2


def test_replay_needs_exactly_one_workflow(operator):
    workflows.start("greet", {"name": "a"}, id="one")
    workflows.start("greet", {"name": "b"}, id="two")
    response = act(operator, "replay_workflow", "one", "two")
    assert "Select exactly one workflow" in response.content.decode()


def test_send_a_message_through_a_form(operator):
    handle = workflows.start("approval", {}, id="needs-approval")
    run_until_idle(handle)
    form = act(operator, "send_message", "needs-approval")
    assert 'name="message_body"' in form.content.decode()
    bad = act(
        operator,
        "send_message",
        "needs-approval",
        apply="1",
        message_name="approve",
        message_body="{not json",
    )
    assert "not valid JSON" in bad.content.decode()
    assert not WorkflowMessage.objects.exists()
    act(
        operator,
        "send_message",
        "needs-approval",
        apply="1",
        message_name="approve",
        message_body='{"by": "admin"}',
    )
    assert run_until_idle(handle) == "completed"
    assert handle.result() == {"approved_by": "admin"}


def change_page(client, workflow_id):
    from django.contrib.admin.utils import quote

    url = reverse("admin:django_rivet_workflow_change", args=[quote(workflow_id)])
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_the_page_links_parent_and_children(viewer):
    parent = workflows.start("family", {}, id="fam")
    run_until_idle(parent)
    html = change_page(viewer, "fam")
    for child in ("fam/audit", "fam/helper", "fam/refunder"):
        assert f">{child}</a>" in html
    assert "fam_2Faudit/change/" in html  # admin-quoted ids with a slash
    child_page = change_page(viewer, "fam/audit")
    assert ">fam</a> (detached)" in child_page


def test_the_replay_check_runs_on_a_post_never_on_a_page_view(viewer, client):
    from django_rivet.workflows import registry, workflow

    ran = []

    @workflow(name="approval")
    async def renamed(ctx, input):
        ran.append(input)  # what a replay check runs
        message = await ctx.messages.next("wait-for-approval", names=["approve"])
        return message.body

    waiting = workflows.start("approval", {}, id="checked")
    run_until_idle(waiting)
    with registry.register_temporarily(renamed):
        html = change_page(viewer, "checked")
        assert ran == []  # a GET ran none of the workflow's code
        assert 'value="check_replay"' in html and 'formmethod="post"' in html
        assert "diverges" not in html
        # A viewer may not run it.
        assert "diverges" not in act(viewer, "check_replay", "checked").content.decode()
        assert ran == []
        operator = log_in_staff(
            client, "view_workflow", "change_workflow", username="op"
        )
        response = act(operator, "check_replay", "checked")
    assert ran == [{}]
    page = response.content.decode()
    assert "Workflow checked diverges at wait-approval" in page
    assert response.redirect_chain[-1][0].endswith("/checked/change/")
    assert (
        "replays cleanly" in act(operator, "check_replay", "checked").content.decode()
    )


def test_the_page_shows_a_failed_steps_traceback(viewer):
    handle = workflows.start("divider", {}, id="tb")
    run_until_idle(handle)
    html = change_page(viewer, "tb")
    assert "<summary>traceback</summary><pre>Traceback (most recent call last):" in html
    assert "ZeroDivisionError: division by zero" in html


def test_resume_action(operator):
    waiting = workflows.start("approval", {}, id="to-resume")
    run_until_idle(waiting)
    waiting.cancel()
    response = act(operator, "resume_workflows", "to-resume")
    assert "Resume: 1 workflow(s)." in response.content.decode()
    assert waiting.status == "sleeping"
    response = act(operator, "resume_workflows", "to-resume")
    assert "Did not resume to-resume" in response.content.decode()


def test_the_page_shows_the_attributes(viewer):
    workflows.start("greet", {"name": "x"}, id="tagged", attributes={"tenant": "42"})
    html = change_page(viewer, "tagged")
    assert "<code>tenant</code> = &#x27;42&#x27;" in html


def test_a_run_of_another_version_says_what_it_waits_for(viewer, settings):
    """Issue 44: a run of another application version is visible as waiting
    for a worker of its version; a debounced one says when it starts."""
    settings.RIVET = {"APP_VERSION": "A", "WORKFLOW_QUEUES": {"q": {}}}
    workflows.start("greet", {"name": "b"}, id="on-b", version="B")
    page = viewer.get(reverse("admin:django_rivet_workflow_change", args=["on-b"]))
    assert "waits for a worker of version B: this deployment is A" in (
        page.content.decode()
    )
    listing = viewer.get(reverse(CHANGELIST), {"version": "B"}).content.decode()
    assert "on-b" in listing
    workflows.start(
        "greet", {"name": "d"}, id="burst", queue="q", dedup_key="k", debounce=60
    )
    page = viewer.get(reverse("admin:django_rivet_workflow_change", args=["burst"]))
    assert "unless another start of its key comes first" in page.content.decode()
