"""Test settings for servers whose spans a test reads (``RIVET_TEST_SPAN_FILE``).

The suite's settings, plus an OpenTelemetry SDK provider exporting every
span of the process as JSON lines to that file (tests/support/otel.py).
"""

import os

from tests.settings import *  # noqa: F403

if os.environ.get("RIVET_TEST_SPAN_FILE"):
    from tests.support.otel import export_to_file

    export_to_file(os.environ["RIVET_TEST_SPAN_FILE"])

if os.environ.get("RIVET_TEST_METRICS_FROM"):
    # Prometheus scrapes from loopback in the multi-process test.
    RIVET = {**RIVET, "METRICS_ALLOWED_IPS": [os.environ["RIVET_TEST_METRICS_FROM"]]}  # noqa: F405

if os.environ.get("RIVET_TEST_TRUSTED_PROXIES"):
    RIVET = {**RIVET, "TRUSTED_PROXIES": [os.environ["RIVET_TEST_TRUSTED_PROXIES"]]}  # noqa: F405
