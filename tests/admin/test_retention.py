"""What the admin says about retention: rows eligible for purge, a workflow's purge."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from django_rivet import actors, workflows
from django_rivet.testing import freeze_time, run_until_idle
from tests.support.clock import START
from tests.upkeep.test_retention import HOUR, finished_workflow, rivet, tick

# pg: the PostgreSQL leg runs this module (the counts use the retention's
# window functions).
pytestmark = [pytest.mark.pg, pytest.mark.django_db]


# -- the admin -------------------------------------------------------------------------
def summary(viewer, model):
    page = viewer.get(reverse(f"admin:django_rivet_{model}_changelist"))
    assert page.status_code == 200
    html = page.content.decode()
    start = html.index('class="help rivet-retention">') + len(
        'class="help rivet-retention">'
    )
    return html[start : html.index("</p>", start)]


@rivet(WORKFLOW_RETENTION=2 * HOUR, SCHEDULE_RETENTION=HOUR, CRON_HISTORY=1)
def test_the_admin_shows_rows_eligible_for_purge_per_model(viewer):
    with freeze_time(START) as clock:
        finished_workflow("old", message="note")
        clock.advance(HOUR)
        finished_workflow("recent")
        alarm = actors.get_or_create("alarmClock", "admin")
        alarm.call("set_alarm", 1, "fired")
        alarm.call("set_every", "tick", 10)
        tick(clock, 3)
        clock.advance(HOUR - 20)  # the schedule fired at START + HOUR + 10
        assert summary(viewer, "workflow") == (
            "1 row is eligible for purge now "
            "(finished workflows are kept 2 hours after they finish)."
        )
        assert summary(viewer, "workflowmessage").startswith("1 row is eligible")
        assert summary(viewer, "schedule") == (
            "0 rows are eligible for purge now (fired schedules are kept 1 hour)."
        )
        clock.advance(1)
        assert summary(viewer, "schedule").startswith("1 row is eligible")
        assert summary(viewer, "queuemessage").startswith("0 rows are eligible")
        # Each run trims its own job: nothing is left over.
        assert summary(viewer, "cronrun") == (
            "0 rows are eligible for purge now "
            "(1 runs are kept per cron job (CRON_HISTORY) by default)."
        )


@rivet(WORKFLOW_RETENTION=timedelta(days=7))
def test_a_workflow_page_says_when_it_will_be_purged(viewer):
    with freeze_time(START):
        finished_workflow("finished")
        waiting = workflows.start("approval", {}, id="waiting")
        assert run_until_idle(waiting) == "sleeping"

    def purged(workflow_id):
        url = reverse("admin:django_rivet_workflow_change", args=[workflow_id])
        html = viewer.get(url).content.decode()
        return html.split("field-purge")[1].split("field-wake_at")[0]

    assert (
        "At the first sweep after 2026-06-08 12:00:00 UTC "
        "(7 days after it finished; WORKFLOW_RETENTION)." in purged("finished")
    )
    assert "Never while it has not finished." in purged("waiting")
    with rivet(WORKFLOW_RETENTION=None):
        assert "Never: WORKFLOW_RETENTION is None" in purged("finished")
