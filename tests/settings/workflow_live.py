"""Celery workers of the workflow tests with the live window and the cache on.

A waiting run keeps its coroutine and its lease for up to
``RIVET_TEST_LIVE_WAIT`` seconds (30 by default), so a test can kill the
worker while a workflow waits live; each worker keeps the histories its
runs leave (``WORKFLOW_CACHE_SIZE``), so a workflow that comes back to a
worker after another one ran it must be read again, not served (issue 46).
"""

import os

from tests.settings.workflow import *  # noqa: F403
from tests.settings.workflow import RIVET

RIVET = {
    **RIVET,
    "WORKFLOW_LIVE_WAIT": float(os.environ.get("RIVET_TEST_LIVE_WAIT", "30")),
    "WORKFLOW_CACHE_SIZE": 100,
}
