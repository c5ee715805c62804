"""Settings of Celery workers started by the workflow tests.

Short leases and sweeps, so a killed worker's workflow is resumed within
seconds (production keeps the 30 s / 5 s defaults).
"""

from tests.settings import *  # noqa: F403
from tests.settings import RIVET

RIVET = {**RIVET, "WORKFLOW_LEASE_SECONDS": 3, "SWEEP_INTERVAL": 1}
