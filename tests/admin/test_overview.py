"""The admin's overview page (issue 28): counts people act on, linked to the rows."""

import re
from datetime import timedelta
from html import unescape

import pytest
from django.contrib.auth.models import Permission, User
from django.test import override_settings
from django.urls import reverse

from django_rivet import actors, clock, workflows
from django_rivet.models import Connection, Workflow, WorkflowStatus
from django_rivet.testing import freeze_time, run_due, run_until_idle

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/admin/django_rivet/overview/"


@pytest.fixture
def admin_client(client):
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


def link_after(page, label):
    """Return the number and link that follow ``label`` in the page."""
    found = re.search(
        re.escape(label) + r'.*?<a [^>]*href="([^"]+)"[^>]*>(\d+)</a>', page, re.S
    )
    assert found, label
    return int(found.group(2)), unescape(found.group(1))


def changelist_ids(client, link):
    """The primary keys of the rows a change list shows."""
    page = client.get(link)
    assert page.status_code == 200, link
    return [str(row.pk) for row in page.context["cl"].result_list]


def make_trouble(frozen):
    """One of everything the page counts (under the virtual clock ``frozen``)."""
    alarm = actors.get_or_create("alarmClock", "overview")
    # Failures for good at once: no retries.
    with override_settings(RIVET={"SCHEDULE_MAX_RETRIES": 0}):
        alarm.call("schedule_call", 5, "boom")  # fails when it fires
        alarm.call("schedule_call", 5, "tick")  # fires 10 s late
        frozen.advance(15)
        run_due()
        mailbox = actors.get_or_create("mailbox", "overview")
        mailbox.send("jobs", "crash")
        run_due()
    doomed = workflows.start("doomed", id="doomed-1")
    assert run_until_idle(doomed) == "failed"
    late = workflows.start("approval", {}, id="late-1", timeout=5)
    run_until_idle(late)
    frozen.advance(6)  # its deadline passes: cancelled with reason timeout
    assert run_until_idle(late) == "cancelled"
    actors.get_or_create("shop", "overview").call("enqueue", {"n": 1})
    actors.get_or_create("shop", "overview").call("later")
    waiting = workflows.start("approval", {}, id="stuck-1")
    run_until_idle(waiting)
    # Its worker crashed a minute ago and no sweeper took it over.
    Workflow.objects.filter(pk="stuck-1").update(
        status=WorkflowStatus.RUNNING,
        lease_token="crashed",
        lease_expires_at=clock.now_datetime() - timedelta(minutes=1),
    )
    Connection.objects.create(
        actor_id=alarm.actor_id, channel_name="specific.x", server_id="s1"
    )


def test_the_overview_counts_failed_and_stuck_work_and_links_to_those_rows(
    admin_client,
):
    with freeze_time() as frozen:
        make_trouble(frozen)
        page = admin_client.get(URL).content.decode()
        for label, expected in [
            ("schedules", 1),
            ("cron runs", 0),
            ("queue messages", 1),
            ("workflows", 1),
            ("workflows past their deadline", 1),
        ]:
            count, link = link_after(page, f'<th scope="row">{label}</th>')
            assert count == expected, label
            assert len(changelist_ids(admin_client, link)) == expected, link
        count, link = link_after(page, "Stuck workflows")
        assert count == 1
        assert changelist_ids(admin_client, link) == ["stuck-1"]


def test_the_overview_shows_queue_depths_connections_and_lateness(admin_client):
    with freeze_time() as frozen:
        make_trouble(frozen)
        page = admin_client.get(URL).content.decode()
        depth, link = link_after(page, "<td>orders</td>")
        assert depth == 1
        assert len(changelist_ids(admin_client, link)) == 1
        count, link = link_after(page, '<th scope="row">alarmClock</th>')
        assert count == 1
        assert len(changelist_ids(admin_client, link)) == 1
        mail = {"WORKFLOW_QUEUES": {"mail": {"concurrency": 1}}}
        with override_settings(RIVET=mail):
            workflows.start("approval", {}, id="queued-1", queue="mail")
            workflows.start("approval", {}, id="queued-2", queue="mail")
            page = admin_client.get(URL).content.decode()
        queued, link = link_after(page, "<td>mail</td>")
        assert queued == 1
        assert changelist_ids(admin_client, link) == ["queued-2"]
    # Two schedules fired 10 s late (one of them failed): p50 and p99 are 10 s.
    assert re.search(r"p50 <span[^>]*>10\.000 s", page)
    assert re.search(r"p99 <span[^>]*>10\.000 s", page)
    assert page.count('<svg class="rivet-chart"') == 2
    assert 'aria-label="Schedule lateness p50 and p99' in page


def test_the_overview_is_listed_in_the_admin_index(admin_client):
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert f'href="{URL}"' in page


def test_the_overview_needs_staff_and_its_view_permission(client):
    assert client.get(URL).status_code == 302  # anonymous: to the login page
    client.force_login(User.objects.create_user("plain", password="pw"))
    assert "/login/" in client.get(URL)["Location"]  # not staff
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(URL).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_overview"))
    assert client.get(URL).status_code == 200
