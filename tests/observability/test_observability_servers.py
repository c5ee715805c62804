"""Traces and metrics across real processes (issue 28).

- An HTTP action served by daphne starts a workflow that a real Celery
  worker runs: both processes export their spans (tests/settings/otel.py,
  one JSON line per span) and the run and step spans are in the trace of
  the request's ``traceparent``, children of the action's span.
- prometheus_client's multi-process mode: two daphne processes share one
  ``PROMETHEUS_MULTIPROC_DIR`` and a scrape of either counts both.
"""

import contextlib
import os
import subprocess

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("prometheus_client")

from django_rivet.models import Workflow  # noqa: E402
from tests.support.otel import read_spans  # noqa: E402
from tests.support.polling import wait_for  # noqa: E402
from tests.support.servers import (  # noqa: E402
    ROOT,
    celery_worker,
    daphne_command,
    daphne_server,
    free_port,
    server_env,
    stop_process,
    uvicorn_command,
    wait_for_port,
)

pytestmark = [pytest.mark.servers, pytest.mark.django_db(transaction=True)]

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def call(base, name, action, *args, key="k", headers=None):
    return httpx.post(
        f"{base}/rivet/actors/{name}/actions/{action}",
        params={"key": key},
        json={"args": list(args)},
        headers=headers or {},
        timeout=30,
    )


def test_a_workflow_started_over_http_runs_on_a_celery_worker_in_the_same_trace(
    broker, redis_url, tmp_path
):
    span_file = str(tmp_path / "spans.jsonl")
    env = server_env(
        RIVET_TEST_REDIS_URL=redis_url,
        DJANGO_SETTINGS_MODULE="tests.settings.otel",
        RIVET_TEST_SPAN_FILE=span_file,
    )
    with daphne_server(env) as base, celery_worker(env) as worker:
        response = call(
            base, "shop", "place", "ann", headers={"traceparent": TRACEPARENT}
        )
        assert response.status_code == 200, response.text
        workflow_id = response.json()["output"]

        def finished():
            status = Workflow.objects.filter(pk=workflow_id).values_list(
                "status", flat=True
            )
            return status.first() == "completed"

        wait_for(finished, what="the worker completing the workflow")
        # The worker exports a run's span when the run ends, after its release.
        wait_for(
            lambda: (
                len(
                    [
                        s
                        for s in read_spans(span_file)
                        if s["name"] == "rivet.workflow.run"
                    ]
                )
                >= 2
            ),
            what="both runs' spans",
        )
    spans = read_spans(span_file)
    (action,) = [s for s in spans if s["name"] == "rivet.action"]
    assert action["trace_id"] == TRACE_ID
    assert action["parent_id"] == PARENT_ID
    assert action["attributes"]["rivet.action"] == "place"
    assert action["pid"] != worker.pid  # served by daphne
    runs = [s for s in spans if s["name"] == "rivet.workflow.run"]
    # The first run's second step fails once; its retry is a second run.
    assert len(runs) == 2
    assert {run["trace_id"] for run in runs} == {TRACE_ID}
    assert {run["parent_id"] for run in runs} == {action["span_id"]}
    assert {run["attributes"]["rivet.workflow.id"] for run in runs} == {workflow_id}
    assert {run["pid"] for run in runs} == {worker.pid}  # run by the worker
    run_ids = {run["span_id"] for run in runs}
    steps = [s for s in spans if s["name"] == "rivet.workflow.step"]
    assert [
        (s["attributes"]["rivet.step.name"], s["attributes"]["rivet.step.attempt"])
        for s in steps
    ] == [("first", 1), ("second", 1), ("second", 2)]
    assert all(s["trace_id"] == TRACE_ID and s["parent_id"] in run_ids for s in steps)


def test_two_processes_in_multiprocess_mode_add_up_in_one_scrape(tmp_path):
    folder = tmp_path / "prometheus"
    folder.mkdir()
    env = server_env(
        DJANGO_SETTINGS_MODULE="tests.settings.otel",
        PROMETHEUS_MULTIPROC_DIR=str(folder),
        RIVET_TEST_METRICS_FROM="127.0.0.1",
    )
    with daphne_server(env) as first, daphne_server(env) as second:
        assert call(first, "shop", "fail").status_code == 500
        assert call(second, "shop", "fail").status_code == 500
        assert call(second, "shop", "ping").status_code == 200
        scrape = httpx.get(f"{first}/metrics/", timeout=30)
    assert scrape.status_code == 200, scrape.text
    text = scrape.text
    failed = 'rivet_actions_total{action="fail",actor="shop",outcome="error",'
    ok = 'rivet_actions_total{action="ping",actor="shop",outcome="ok",'
    failed, ok = failed + 'transport="http"}', ok + 'transport="http"}'
    assert f"{failed} 2.0" in text
    assert f"{ok} 1.0" in text
    # Each process wrote its own sample files.
    pids = {name.rsplit("_", 1)[-1] for name in os.listdir(folder)}
    assert len(pids) >= 2
    # The database gauges are there once, not once per process.
    assert text.count("# TYPE rivet_schedules_pending gauge") == 1


@contextlib.contextmanager
def served(kind, env, *flags):
    """Run the quickstart's asgi under daphne or uvicorn with extra ``flags``."""
    port = free_port()
    command = daphne_command(port) if kind == "daphne" else uvicorn_command(port)
    command[-1:-1] = flags  # before the application's dotted path
    proc = subprocess.Popen(command, cwd=ROOT, env=env)
    try:
        wait_for_port(port, proc=proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


def scrape(base, forwarded):
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    return httpx.get(f"{base}/metrics/", headers=headers, timeout=30).status_code


def test_a_forwarded_address_reaches_the_metrics_only_through_a_trusted_proxy():
    # The audit: METRICS_ALLOWED_IPS = ["10.0.0.0/8"] admitted anyone sending
    # X-Forwarded-For: 10.1.2.3 to daphne --proxy-headers or to uvicorn
    # (which trusts the header from 127.0.0.1 by default).
    allowed = {"DJANGO_SETTINGS_MODULE": "tests.settings.otel"}
    env = server_env(**allowed, RIVET_TEST_METRICS_FROM="10.0.0.0/8")
    for kind, flags in (("daphne", ["--proxy-headers"]), ("uvicorn", [])):
        with served(kind, env, *flags) as base:
            assert scrape(base, "10.1.2.3") == 403, kind
            assert scrape(base, "") == 403, kind  # 127.0.0.1 is not listed
    # A proxy on 127.0.0.1 listed in TRUSTED_PROXIES, the server reading no
    # header itself: the client is the last address the proxy appended.
    trusted = server_env(
        **allowed,
        RIVET_TEST_METRICS_FROM="10.0.0.0/8",
        RIVET_TEST_TRUSTED_PROXIES="127.0.0.1",
    )
    with served("daphne", trusted) as base:
        assert scrape(base, "10.1.2.3") == 200
        assert scrape(base, "10.1.2.3, 192.0.2.7") == 403  # the client wrote 10.x
