"""Traces, metrics and log lines (issue 28), with the real OpenTelemetry SDK
(in-memory exporter) and the real prometheus_client.

The HTTP views, the WebSocket consumer, the runtime and the database are
real; the servers (a Celery worker, two daphne processes) are in
test_observability_servers.py.
"""

import json
import logging
import os
import textwrap

import pytest

# The extras (in the dev install); without them the rest of the suite is the
# test of the no-extras path.
pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("prometheus_client")

from django.contrib.auth.models import User  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from prometheus_client import REGISTRY  # noqa: E402

from django_rivet import actors, workflows  # noqa: E402
from django_rivet.models import Schedule  # noqa: E402
from django_rivet.testing import (  # noqa: E402
    RivetCommunicator,
    freeze_time,
    run_due,
    run_until_idle,
)
from tests.support.otel import as_dict, memory_exporter  # noqa: E402
from tests.support.servers import run_python  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture
def spans():
    """The spans this test ends, as dicts (tests/support/otel.py)."""
    exporter, processor = memory_exporter()
    exporter.clear()
    processor.armed = True
    try:
        yield lambda: [as_dict(span) for span in exporter.get_finished_spans()]
    finally:
        processor.armed = False
        exporter.clear()


def named(spans, name):
    return [span for span in spans if span["name"] == name]


def sample(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0.0


def post_action(client, name, action, *args, key="k", headers=None):
    return client.post(
        f"/rivet/actors/{name}/actions/{action}?key={key}",
        data=json.dumps({"args": list(args)}),
        content_type="application/json",
        headers=headers or {},
    )


# -- traces -------------------------------------------------------------------------
def test_an_http_action_with_a_traceparent_is_a_span_in_that_trace(spans):
    response = post_action(
        Client(), "shop", "ping", headers={"traceparent": TRACEPARENT}
    )
    assert response.status_code == 200, response.content
    (span,) = named(spans(), "rivet.action")
    assert span["trace_id"] == TRACE_ID
    assert span["parent_id"] == PARENT_ID
    assert span["kind"] == "SERVER"
    attributes = span["attributes"]
    actor_id = actors.get("shop", "k").actor_id
    assert attributes["rivet.actor.name"] == "shop"
    assert attributes["rivet.actor.id"] == str(actor_id)
    assert attributes["rivet.action"] == "ping"
    assert attributes["rivet.transport"] == "http"
    assert "rivet.error.code" not in attributes
    assert span["status"] == "UNSET"


@pytest.mark.parametrize("incoming", ["continue", "link", "new"])
def test_incoming_trace_decides_whether_a_client_chooses_the_trace(spans, incoming):
    # The client's span is not sampled (flags 00): continued, it decides
    # that the server's spans are not recorded either.
    unsampled = f"00-{TRACE_ID}-{PARENT_ID}-00"
    with override_settings(RIVET={"INCOMING_TRACE": incoming}), freeze_time():
        post_action(Client(), "shop", "later", headers={"traceparent": unsampled})
        stored = Schedule.objects.get().traceparent
    found = named(spans(), "rivet.action")
    if incoming == "continue":
        assert found == []  # suppressed by the client's flags
        assert stored.split("-")[1] == TRACE_ID  # and its trace id stored
        return
    (span,) = found
    assert (span["trace_id"], span["parent_id"]) != (TRACE_ID, PARENT_ID)
    assert span["parent_id"] is None  # a trace of the server's own
    # What schedules and workflows continue is the server's trace.
    assert stored.split("-")[1] == span["trace_id"]
    linked = [link["trace_id"] for link in span["links"]]
    assert linked == ([TRACE_ID] if incoming == "link" else [])


def test_a_failing_action_span_has_its_error_code_and_an_error_status(spans):
    response = post_action(
        Client(), "shop", "fail", headers={"traceparent": TRACEPARENT}
    )
    assert response.status_code == 500
    refused = post_action(Client(), "shop", "refuse")
    assert refused.status_code == 400
    failed, rejected = named(spans(), "rivet.action")
    assert failed["attributes"]["rivet.error.code"] == "rivet/internal_error"
    assert failed["attributes"]["error.type"] == "builtins.RuntimeError"
    assert failed["status"] == "ERROR"
    # An error meant for the caller is named but is no server failure.
    assert rejected["attributes"]["rivet.error.code"] == "user/out_of_stock"
    assert rejected["status"] == "UNSET"


def test_an_actor_to_actor_call_is_a_child_of_the_calling_action(spans):
    post_action(
        Client(), "shop", "tell_counter", "c1", headers={"traceparent": TRACEPARENT}
    )
    by_action = {
        s["attributes"]["rivet.action"]: s for s in named(spans(), "rivet.action")
    }
    outer, inner = by_action["tell_counter"], by_action["increment"]
    assert inner["parent_id"] == outer["span_id"]
    assert inner["trace_id"] == TRACE_ID
    assert inner["attributes"]["rivet.transport"] == "internal"
    assert inner["attributes"]["rivet.actor.name"] == "counter"


def test_scheduled_and_queued_work_continue_the_trace_that_created_them(spans):
    with freeze_time():
        post_action(Client(), "shop", "later", headers={"traceparent": TRACEPARENT})
        post_action(
            Client(), "shop", "enqueue", {"n": 1}, headers={"traceparent": TRACEPARENT}
        )
        assert Schedule.objects.get().traceparent.split("-")[1] == TRACE_ID
        assert run_due() == 2
    found = spans()
    creating = {
        s["attributes"]["rivet.action"]: s for s in named(found, "rivet.action")
    }
    (schedule,) = named(found, "rivet.schedule")
    assert schedule["trace_id"] == TRACE_ID
    assert schedule["parent_id"] == creating["later"]["span_id"]
    assert schedule["kind"] == "CONSUMER"
    assert schedule["attributes"]["rivet.action"] == "ping"
    (queued,) = named(found, "rivet.queue")
    assert queued["parent_id"] == creating["enqueue"]["span_id"]
    assert queued["attributes"]["messaging.destination.name"] == "orders"


def test_a_workflow_run_and_its_step_attempts_continue_the_starting_trace(spans):
    with freeze_time() as clock:
        response = post_action(
            Client(), "shop", "place", "ann", headers={"traceparent": TRACEPARENT}
        )
        workflow_id = response.json()["output"]
        assert run_until_idle(workflow_id) == "sleeping"  # step "second" failed once
        clock.advance(1)
        assert run_until_idle(workflow_id) == "completed"
    found = spans()
    (action,) = named(found, "rivet.action")
    runs = named(found, "rivet.workflow.run")
    assert len(runs) == 2
    for run in runs:
        assert run["trace_id"] == TRACE_ID
        assert run["parent_id"] == action["span_id"]
        assert run["attributes"]["rivet.workflow.id"] == workflow_id
        assert run["attributes"]["rivet.workflow.name"] == "twoSteps"
    run_ids = {run["span_id"] for run in runs}
    steps = named(found, "rivet.workflow.step")
    attempts = [
        (s["attributes"]["rivet.step.name"], s["attributes"]["rivet.step.attempt"])
        for s in steps
    ]
    assert attempts == [("first", 1), ("second", 1), ("second", 2)]
    assert all(s["parent_id"] in run_ids for s in steps)
    assert [s["status"] for s in steps] == ["UNSET", "ERROR", "UNSET"]
    assert all(s["attributes"]["rivet.workflow.name"] == "twoSteps" for s in steps)
    flushes = named(found, "rivet.workflow.flush")
    assert flushes and all(f["trace_id"] == TRACE_ID for f in flushes)


async def test_a_websocket_connect_continues_the_handshake_trace_and_actions_link_it(
    spans,
):
    comm = RivetCommunicator(
        "counter", ["ws"], headers=[(b"traceparent", TRACEPARENT.encode())]
    )
    assert (await comm.handshake())["type"] == "init"
    assert await comm.call("increment", 2) == 2
    await comm.disconnect()
    found = spans()
    (connect,) = named(found, "rivet.connect")
    assert connect["trace_id"] == TRACE_ID
    assert connect["parent_id"] == PARENT_ID
    assert connect["attributes"]["rivet.transport"] == "websocket"
    (action,) = named(found, "rivet.action")
    # One socket carries unrelated calls: each starts a trace of its own.
    assert action["trace_id"] != TRACE_ID
    assert action["links"] == [{"trace_id": TRACE_ID, "span_id": PARENT_ID}]
    assert action["attributes"]["rivet.action"] == "increment"
    assert action["attributes"]["rivet.actor.name"] == "counter"


# -- metrics -------------------------------------------------------------------------
def staff_client():
    user = User.objects.create_user("ops", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


def test_a_failing_action_counts_as_an_error_and_the_scrape_shows_it():
    labels = {
        "actor": "shop",
        "action": "fail",
        "transport": "http",
        "outcome": "error",
    }
    before = sample("rivet_actions_total", **labels)
    assert post_action(Client(), "shop", "fail").status_code == 500
    assert sample("rivet_actions_total", **labels) == before + 1
    scrape = staff_client().get("/metrics/")
    assert scrape.status_code == 200
    assert scrape["Content-Type"].startswith("text/plain")
    line = (
        'rivet_actions_total{action="fail",actor="shop",outcome="error",'
        f'transport="http"}} {before + 1}'
    )
    assert line in scrape.content.decode()


def test_outcomes_and_durations_are_counted_per_action():
    def count(action, outcome):
        return sample(
            "rivet_actions_total",
            actor="shop",
            action=action,
            transport="http",
            outcome=outcome,
        )

    ok, rejected = count("ping", "ok"), count("refuse", "rejected")
    observed = sample(
        "rivet_action_duration_seconds_count", actor="shop", action="ping"
    )
    post_action(Client(), "shop", "ping")
    post_action(Client(), "shop", "refuse")
    assert count("ping", "ok") == ok + 1
    assert count("refuse", "rejected") == rejected + 1
    assert (
        sample("rivet_action_duration_seconds_count", actor="shop", action="ping")
        == observed + 1
    )


def test_label_values_never_carry_what_the_caller_made_up():
    response = post_action(Client(), "shop", "no-such-action-1234")
    assert response.status_code == 404
    post_action(Client(), "no-such-actor-5678", "ping")
    text = staff_client().get("/metrics/").content.decode()
    assert "no-such-action-1234" not in text
    assert "no-such-actor-5678" not in text
    assert sample(
        "rivet_actions_total", actor="shop", action="", transport="http",
        outcome="rejected",
    ) >= 1  # fmt: skip


def test_failed_background_work_and_lateness_are_counted():
    failed = sample("rivet_work_failed_total", kind="schedule")
    late = sample("rivet_schedule_lateness_seconds_count", kind="schedule")
    alarm = actors.get_or_create("alarmClock", "metrics")
    # Only a failure for good counts: no retries here.
    with override_settings(RIVET={"SCHEDULE_MAX_RETRIES": 0}), freeze_time() as clock:
        alarm.call("schedule_call", 5, "boom")
        clock.advance(7)
        assert run_due() == 1
    assert sample("rivet_work_failed_total", kind="schedule") == failed + 1
    assert sample("rivet_schedule_lateness_seconds_count", kind="schedule") == late + 1
    # 7 s after it was made, 2 s after it was due: in the 2.5 s bucket, not 1 s.
    bucket = "rivet_schedule_lateness_seconds_bucket"
    le_1 = sample(bucket, kind="schedule", le="1.0")
    le_2_5 = sample(bucket, kind="schedule", le="2.5")
    assert le_2_5 - le_1 >= 1


def test_workflow_steps_and_failures_are_counted():
    ok = sample("rivet_workflow_steps_total", workflow="twoSteps", outcome="ok")
    errors = sample("rivet_workflow_steps_total", workflow="twoSteps", outcome="error")
    doomed = sample("rivet_work_failed_total", kind="workflow")
    with freeze_time() as clock:
        handle = workflows.start("twoSteps", {"name": "bo"})
        run_until_idle(handle)
        clock.advance(1)
        assert run_until_idle(handle) == "completed"
        assert run_until_idle(workflows.start("doomed")) == "failed"
    assert sample("rivet_workflow_steps_total", workflow="twoSteps", outcome="ok") == (
        ok + 2
    )
    assert (
        sample("rivet_workflow_steps_total", workflow="twoSteps", outcome="error")
        == errors + 1
    )
    assert sample("rivet_work_failed_total", kind="workflow") == doomed + 1


def test_the_scrape_reads_the_gauges_from_the_database():
    with freeze_time():
        shop = actors.get_or_create("shop", "gauges")
        shop.call("later")
        shop.call("enqueue", {"n": 2})
        workflows.start("approval", {}, id="gauge-wf")
        # One admitted at once, the second waits in its workflow queue.
        with override_settings(RIVET={"WORKFLOW_QUEUES": {"mail": {"concurrency": 1}}}):
            workflows.start("approval", {}, id="gauge-q1", queue="mail")
            workflows.start("approval", {}, id="gauge-q2", queue="mail")
    text = staff_client().get("/metrics/").content.decode()
    assert "rivet_schedules_pending 1.0" in text
    assert 'rivet_queue_depth{actor="shop",queue="orders"} 1.0' in text
    # gauge-wf, and gauge-q1 admitted by its queue; gauge-q2 waits.
    assert 'rivet_workflows{state="pending",workflow="approval"} 2.0' in text
    assert 'rivet_workflows{state="queued",workflow="approval"} 1.0' in text
    assert "rivet_workflows_stuck 0.0" in text
    assert 'rivet_workflow_queue_depth{queue="mail"} 1.0' in text


def test_events_published_are_counted():
    before = sample("rivet_events_published_total")
    actors.get_or_create("chatRoom", "metrics").call("send_message", "hi")
    assert sample("rivet_events_published_total") == before + 1


# -- the metrics view's access ------------------------------------------------------
def test_the_metrics_view_refuses_an_anonymous_request():
    response = Client().get("/metrics/")
    assert response.status_code == 403
    assert b"rivet_" not in response.content


def test_the_metrics_view_refuses_a_logged_in_user_who_is_not_staff():
    client = Client()
    client.force_login(User.objects.create_user("visitor", password="pw"))
    assert client.get("/metrics/").status_code == 403


def test_staff_access_can_be_switched_off():
    client = staff_client()
    with override_settings(RIVET={"METRICS_ALLOW_STAFF": False}):
        assert client.get("/metrics/").status_code == 403


def test_listed_addresses_and_networks_may_scrape_without_logging_in():
    with override_settings(RIVET={"METRICS_ALLOWED_IPS": ["10.1.0.0/16", "::1"]}):
        inside = Client(REMOTE_ADDR="10.1.2.3").get("/metrics/")
        outside = Client(REMOTE_ADDR="10.2.0.1").get("/metrics/")
        v6 = Client(REMOTE_ADDR="::1").get("/metrics/")
    assert inside.status_code == 200
    assert b"# TYPE rivet_actions_total counter" in inside.content
    assert outside.status_code == 403
    assert v6.status_code == 200


@pytest.mark.parametrize(
    ("peer", "headers", "trusted", "status"),
    [
        # What the server set REMOTE_ADDR from (daphne --proxy-headers takes
        # the header's first entry; uvicorn its last untrusted one): refused.
        ("10.1.2.3", {"HTTP_X_FORWARDED_FOR": "10.1.2.3"}, [], 403),
        ("10.1.2.3", {"HTTP_X_FORWARDED_FOR": "10.1.2.3, 127.0.0.1"}, [], 403),
        ("10.1.2.3", {"HTTP_X_REAL_IP": "10.1.2.3"}, ["127.0.0.1"], 403),
        # A forwarding header and no trusted proxy: the peer may be a proxy.
        ("10.1.2.3", {"HTTP_X_FORWARDED_FOR": "192.0.2.7"}, [], 403),
        ("10.1.2.3", {"HTTP_FORWARDED": "for=10.9.9.9"}, [], 403),
        ("10.1.2.3", {}, [], 200),
        # Through a trusted proxy: the last address it did not write.
        ("127.0.0.1", {"HTTP_X_FORWARDED_FOR": "10.1.2.3"}, ["127.0.0.1"], 200),
        ("127.0.0.1", {"HTTP_X_FORWARDED_FOR": "10.1.2.3"}, [], 403),
        (
            "127.0.0.1",
            {"HTTP_X_FORWARDED_FOR": "10.1.2.3, 192.0.2.7"},
            ["127.0.0.0/8"],
            403,
        ),
        (
            "127.0.0.1",
            {"HTTP_X_FORWARDED_FOR": "192.0.2.7, 10.1.2.3, 172.16.0.1"},
            ["127.0.0.1", "172.16.0.0/12"],
            200,
        ),
        (
            "127.0.0.1",
            {"HTTP_X_FORWARDED_FOR": "garbage, 127.0.0.1"},
            ["127.0.0.1"],
            403,
        ),
        ("127.0.0.1", {"HTTP_X_REAL_IP": "10.1.2.3"}, ["127.0.0.1"], 403),
    ],
)
def test_a_forwarded_client_address_counts_only_through_trusted_proxies(
    peer, headers, trusted, status
):
    rivet = {"METRICS_ALLOWED_IPS": ["10.0.0.0/8"], "TRUSTED_PROXIES": trusted}
    with override_settings(RIVET=rivet):
        response = Client(REMOTE_ADDR=peer).get("/metrics/", **headers)
    assert response.status_code == status


def test_a_server_that_rewrites_remote_addr_is_logged_once(caplog, monkeypatch):
    from django_rivet.observability import views

    monkeypatch.setattr(views, "_warned_rewrite", False)
    rivet = {"METRICS_ALLOWED_IPS": ["10.0.0.0/8"]}
    forwarded = {"HTTP_X_FORWARDED_FOR": "10.1.2.3"}
    with override_settings(RIVET=rivet), caplog.at_level(logging.WARNING):
        for _ in range(3):
            Client(REMOTE_ADDR="10.1.2.3").get("/metrics/", **forwarded)
    [record] = [r for r in caplog.records if "took REMOTE_ADDR" in r.getMessage()]
    assert "TRUSTED_PROXIES" in record.getMessage()


def test_the_metrics_view_speaks_openmetrics_when_asked():
    response = staff_client().get(
        "/metrics/", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.rstrip().endswith(b"# EOF")


# -- logs ------------------------------------------------------------------------------
class JsonFormatter(logging.Formatter):
    """What a JSON formatter does: the message plus every extra attribute."""

    standard = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

    def format(self, record):
        fields = {k: v for k, v in vars(record).items() if k not in self.standard}
        return json.dumps({"message": record.getMessage(), **fields})


def test_each_action_logs_a_debug_line_and_a_failure_a_warning_with_fields(
    caplog, spans
):
    caplog.set_level(logging.DEBUG, logger="django_rivet.actions")
    post_action(Client(), "shop", "ping", headers={"traceparent": TRACEPARENT})
    post_action(Client(), "shop", "fail")
    records = [r for r in caplog.records if r.name == "django_rivet.actions"]
    ok, failed = records
    assert ok.levelno == logging.DEBUG and failed.levelno == logging.WARNING
    lines = [json.loads(JsonFormatter().format(record)) for record in records]
    assert lines[0]["actor"] == "shop"
    assert lines[0]["action"] == "ping"
    assert lines[0]["outcome"] == "ok"
    assert lines[0]["code"] == ""
    assert lines[0]["trace_id"] == TRACE_ID
    assert lines[0]["duration"] > 0
    assert lines[1]["action"] == "fail"
    assert lines[1]["code"] == "rivet/internal_error"
    assert lines[1]["outcome"] == "error"
    assert len(lines[1]["trace_id"]) == 32  # a trace of its own
    assert lines[1]["actor_id"] == str(actors.get("shop", "k").actor_id)


def test_without_debug_only_failures_are_logged(caplog):
    caplog.set_level(logging.INFO, logger="django_rivet.actions")
    post_action(Client(), "shop", "ping")
    post_action(Client(), "shop", "refuse")
    assert [
        r.levelname for r in caplog.records if r.name == "django_rivet.actions"
    ] == []
    post_action(Client(), "shop", "fail")
    (line,) = [r for r in caplog.records if r.name == "django_rivet.actions"]
    assert line.levelname == "WARNING"


# -- without the extras --------------------------------------------------------------
NO_EXTRAS = textwrap.dedent(
    """
    import importlib.abc, json, logging, sys

    class Blocked(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("opentelemetry", "prometheus_client"):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, Blocked())
    import django
    django.setup()
    from django.core.management import call_command
    call_command("migrate", verbosity=0)

    logging.getLogger("django_rivet").setLevel(logging.DEBUG)
    lines = []
    class Keep(logging.Handler):
        def emit(self, record):
            lines.append([record.levelname, record.action, record.outcome])
    logging.getLogger("django_rivet.actions").addHandler(Keep())

    from django.contrib.auth.models import User
    from django.test import Client
    from django_rivet import actors, observability, workflows
    from django_rivet.observability import metrics, tracing
    from django_rivet.testing import freeze_time, run_until_idle
    from django_rivet.engine import observe

    shop = actors.get_or_create("shop", "plain")
    assert shop.call("ping") == "pong"
    try:
        shop.call("fail")
    except RuntimeError:
        pass
    with freeze_time() as clock:
        handle = workflows.start("twoSteps", {"name": "x"})
        run_until_idle(handle)
        clock.advance(1)
        status = run_until_idle(handle)
    client = Client()
    client.force_login(User.objects.create_user("ops", is_staff=True))
    print(json.dumps({
        "otel": tracing.INSTALLED,
        "prometheus": metrics.INSTALLED,
        "loaded": sorted(
            m for m in sys.modules
            if m.startswith(("opentelemetry", "prometheus_client"))
        ),
        "engine_observer": observe.observer() is not None,
        "traceparent": observability.traceparent(),
        "workflow": status,
        "scrape": client.get("/metrics/").status_code,
        "lines": lines,
    }))
    """
)


def test_without_the_extras_everything_runs_and_the_hooks_do_nothing(tmp_path):
    env = dict(os.environ)
    env.pop("RIVET_TEST_DATABASE_URL", None)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        RIVET_TEST_DB_DIR=str(tmp_path),
        PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")])),
    )
    found = run_python(NO_EXTRAS, env)
    assert found["otel"] is False and found["prometheus"] is False
    assert found["loaded"] == []
    assert found["engine_observer"] is False
    assert found["traceparent"] == ""
    assert found["workflow"] == "completed"
    assert found["scrape"] == 503  # says which extra to install
    assert found["lines"] == [["DEBUG", "ping", "ok"], ["WARNING", "fail", "error"]]
