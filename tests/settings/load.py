"""Settings of the deployments the load and fault tests start.

Started by tests/support/cluster.py: the suite's settings on the cluster's
PostgreSQL and Redis (the URLs come from the environment), with the channel
layer exactly as channels_redis ships it by default: the tests must hold
without tuning. ``RIVET_LOAD_RIVET`` (JSON) adds RIVET settings.
channels_redis logs the messages it drops.
"""

import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import LOGGING, RIVET

RIVET = {**RIVET, **json.loads(os.environ.get("RIVET_LOAD_RIVET") or "{}")}

LOGGING = {
    **LOGGING,
    "loggers": {
        **LOGGING["loggers"],
        "channels_redis": {"handlers": ["console"], "level": "INFO"},
    },
}
