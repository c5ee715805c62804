"""Settings of the Celery workers started by tests/scheduling/test_background_celery.py.

They install tests.background_app (its scheduled workflow ticks only here),
configure the workflow queues, and sweep every second.
"""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS, RIVET

INSTALLED_APPS = [*INSTALLED_APPS, "tests.background_app"]

WORKFLOW_QUEUES = {
    "probe": {"concurrency": 2},
    "paced": {"rate_limit": (2, 1.0)},
}
RIVET = {
    **RIVET,
    "WORKFLOW_LEASE_SECONDS": 3,
    "SWEEP_INTERVAL": 1,
    "WORKFLOW_QUEUES": WORKFLOW_QUEUES,
}
