"""The in-process worker loop, the embedded worker and rivet_worker."""

import logging
import threading

import pytest
from django.core.management import call_command
from django.test import override_settings

from django_rivet import actors, dispatch, workflows
from django_rivet.models import CronJob, Schedule, ScheduleStatus
from django_rivet.scheduling import queue_delivery
from django_rivet.testing import freeze_time, run_due
from django_rivet.upkeep import worker
from tests.support.clock import START
from tests.support.polling import wait_for

# pg: the PostgreSQL leg runs this module (worker claims; missing-table errors differ
# per backend).
pytestmark = pytest.mark.pg


EMBEDDED = {"EMBEDDED_WORKER": True}


@pytest.fixture
def no_embedded_worker():
    """Stop any embedded worker a test started."""
    yield
    worker.stop_embedded_worker()
    assert not worker.embedded_worker_running()


@pytest.mark.django_db
def test_run_once_runs_due_work_and_a_sweep():
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "once")
        alarm.call("set_alarm", 5, "a")
        loop = worker.Worker()
        assert loop.run_once() == 0
        clock.advance(5)
        assert loop.run_once() == 1
        assert worker.next_due_at() is None


@pytest.mark.django_db
def test_listed_due_work_runs_in_run_due_and_the_worker(monkeypatch):
    pending = [3]

    def run(limit):
        ran, pending[0] = pending[0], 0
        return ran

    listed = [work for work in worker.due_work() if work.name != "workflows"]
    listed.append(worker.DueWork("workflows", run, lambda: 42.0))
    monkeypatch.setattr(worker, "DUE_WORK", tuple(listed))
    assert [work.name for work in worker.due_work()][-1] == "workflows"
    assert run_due() == 3
    assert worker.next_due_at() == 42.0


@pytest.mark.django_db
def test_worker_sleeps_until_the_next_due_time_at_most_the_poll_interval():
    with freeze_time(START):
        alarm = actors.get_or_create("alarmClock", "sleep")
        alarm.call("set_alarm", 0.25, "soon")
        assert worker.Worker(poll_interval=1.0)._idle_delay() == pytest.approx(0.25)
        assert worker.Worker(poll_interval=0.1)._idle_delay() == pytest.approx(0.1)


@pytest.mark.django_db(transaction=True)
def test_worker_loop_fires_work_and_stops_when_asked():
    alarm = actors.get_or_create("alarmClock", "loop")
    stop = threading.Event()
    thread = threading.Thread(target=worker.Worker(poll_interval=0.1).run, args=(stop,))
    thread.start()
    try:
        alarm.call("set_alarm", 0, "from the loop")
        wait_for(lambda: Schedule.objects.filter(status=ScheduleStatus.DONE).exists())
    finally:
        stop.set()
        dispatch.notify_worker()
        thread.join(30)
    assert not thread.is_alive()


@pytest.mark.django_db
def test_embedded_worker_stays_off_unless_the_setting_is_on(client, no_embedded_worker):
    client.get("/")
    assert not worker.embedded_worker_running()
    assert worker.start_embedded_worker() is False


@pytest.mark.django_db(transaction=True)
@override_settings(RIVET=EMBEDDED)
def test_embedded_worker_starts_with_the_first_request_and_fires_schedules(
    client, no_embedded_worker
):
    client.get("/")
    assert worker.embedded_worker_running()
    assert worker.start_embedded_worker() is False  # once per process
    alarm = actors.get_or_create("alarmClock", "embedded")
    alarm.call("set_alarm", 0, "in the web process")
    wait_for(lambda: Schedule.objects.filter(status=ScheduleStatus.DONE).exists())


@pytest.mark.django_db(transaction=True)
@override_settings(RIVET=EMBEDDED)
async def test_embedded_worker_app_follows_the_asgi_lifespan(no_embedded_worker):
    events = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent = []

    async def receive():
        return events.pop(0)

    async def send(message):
        sent.append(message["type"])
        if message["type"] == "lifespan.startup.complete":
            assert worker.embedded_worker_running()

    async def app(scope, receive, send):  # pragma: no cover - not reached
        raise AssertionError("lifespan must not reach the app")

    await worker.EmbeddedWorkerApp(app)({"type": "lifespan"}, receive, send)
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert not worker.embedded_worker_running()


@pytest.mark.django_db
def test_rivet_worker_once_runs_what_is_due(capsys):
    # The command turns Celery wake-ups off for its process; undone after.
    alarm = actors.get_or_create("alarmClock", "command")
    alarm.call("set_alarm", 0, "now")
    call_command("rivet_worker", "--once")
    assert "ran 1 due item(s)" in capsys.readouterr().out


@pytest.mark.django_db
def test_rivet_worker_logs_each_firing_with_its_lateness(caplog):
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "logged")
        alarm.call("set_alarm", 10, "late")
        clock.advance(12.5)
        with caplog.at_level(logging.INFO, logger="django_rivet"):
            call_command("rivet_worker", "--once")
    fired = [r.getMessage() for r in caplog.records if r.msg.startswith("fired ")]
    assert len(fired) == 1
    assert "action=ring" in fired[0]
    assert f"actor_id={alarm.actor_id}" in fired[0]
    assert fired[0].endswith("late_ms=2500")


@pytest.mark.django_db
def test_rivet_worker_logs_each_workflow_run_with_its_lateness(
    caplog,
):
    with freeze_time(START) as clock:
        nap = workflows.start("napper", {"seconds": 60}, id="logged-nap")
        run_due()
        assert nap.status == "sleeping"
        clock.advance(62.5)
        with caplog.at_level(logging.INFO, logger="django_rivet"):
            call_command("rivet_worker", "--once")
    ran = [r.getMessage() for r in caplog.records if r.msg.startswith("workflow ran")]
    assert ran == [
        "workflow ran workflow=logged-nap name=napper state=completed late_ms=2500"
    ]


def test_rivet_worker_shows_its_log_when_the_project_configured_none(
    capsys, monkeypatch
):
    from django_rivet.management.commands.rivet_worker import show_work_log

    rivet_logger = logging.getLogger("django_rivet")
    monkeypatch.setattr(logging.root, "handlers", [])
    monkeypatch.setattr(rivet_logger, "handlers", [])
    monkeypatch.setattr(rivet_logger, "level", logging.NOTSET)
    show_work_log()
    logging.getLogger("django_rivet.scheduler").info("fired schedule id=1")
    assert "INFO django_rivet.scheduler fired schedule id=1" in capsys.readouterr().err


@pytest.mark.django_db
def test_worker_does_not_spin_on_due_work_it_cannot_run():
    box = actors.get_or_create("mailbox", "held")
    box.send("jobs", "held elsewhere")
    assert queue_delivery.claim_next_message(box.actor_id) is not None
    loop = worker.Worker(poll_interval=1.0)
    assert loop.run_once() == 0
    assert loop._idle_delay() >= worker.MIN_IDLE_DELAY


@pytest.mark.django_db
def test_rivet_worker_sends_no_celery_tasks(recording_dispatch):
    # The command forces the worker backend; the fixture restores dispatch.
    with freeze_time(START) as clock:
        alarm = actors.get_or_create("alarmClock", "no-celery")
        alarm.call("set_every", "tick", 60)
        clock.advance(60)
        call_command("rivet_worker", "--once")
    # With Celery on, the claim would have sent run_cron for the next run.
    assert CronJob.objects.get().enqueued_for is None
    assert recording_dispatch.sent == []
    assert dispatch.backend().eta_tasks is False


# -- issue 30: a database without django-rivet's tables ------------------------------
@pytest.mark.django_db(transaction=True)
def test_missing_tables_are_logged_once_per_episode_with_the_migrate_hint(
    monkeypatch, caplog
):
    """One line when the tables go missing, none at each later poll, no traceback."""
    from django.db import connection

    table = Schedule._meta.db_table

    def rename(old, new):
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {old} RENAME TO {new}")

    stop = threading.Event()
    polls = []
    # Each poll's end: the table comes back after the 4th, goes again after
    # the 6th (a second episode), and the loop stops after the 9th.
    script = {
        4: lambda: rename(f"{table}_away", table),
        6: lambda: rename(table, f"{table}_away"),
        9: stop.set,
    }

    def wait_for_work(delay):
        polls.append(delay)
        script.get(len(polls), lambda: None)()

    monkeypatch.setattr(dispatch, "wait_for_work", wait_for_work)
    rename(table, f"{table}_away")
    try:
        with caplog.at_level(logging.INFO, logger="django_rivet"):
            worker.Worker(poll_interval=0.01, sweep_interval=3600).run(stop)
    finally:
        if table not in connection.introspection.table_names():
            rename(f"{table}_away", table)
    assert len(polls) == 9
    records = [r for r in caplog.records if r.name == "django_rivet.worker"]
    errors = [r for r in records if r.levelno >= logging.ERROR]
    assert len(errors) == 2  # one per episode, not one per poll
    for record in errors:
        assert "run `manage.py migrate`" in record.getMessage()
        assert record.exc_info is None  # one line, no traceback
    assert any("found its tables" in r.getMessage() for r in records)
