"""Fixtures of the task backend's tests."""

# The Celery workers' environment of the workflow tests (short leases and
# sweeps, so a killed worker's task is resumed within seconds).
from tests.workflows.test_celery import env  # noqa: F401
