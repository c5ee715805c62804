"""Settings of Celery workers started by the workflow tests.

Short leases and sweeps, so a killed worker's workflow is resumed within
seconds (production keeps the 30 s / 5 s defaults), and a partitioned
workflow queue.
"""

from tests.settings import *  # noqa: F403
from tests.settings import RIVET

# The partitioned queue of test_celery.py's 20 keys x 200 workflows.
WORKFLOW_QUEUES = {
    "tenants": {"concurrency": 8, "partition_concurrency": 2, "worker_concurrency": 2}
}
RIVET = {
    **RIVET,
    "WORKFLOW_LEASE_SECONDS": 3,
    "SWEEP_INTERVAL": 1,
    "WORKFLOW_QUEUES": WORKFLOW_QUEUES,
}
