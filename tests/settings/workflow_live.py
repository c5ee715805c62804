"""Celery workers of the workflow tests with the live window on.

A waiting run keeps its coroutine and its lease for up to 30 s, so a test
can kill the worker while a workflow waits live (issue 46).
"""

from tests.settings.workflow import *  # noqa: F403
from tests.settings.workflow import RIVET

RIVET = {**RIVET, "WORKFLOW_LIVE_WAIT": 30}
