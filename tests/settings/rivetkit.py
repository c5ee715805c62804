"""Settings of the daphne server the RivetKit-client tests start.

The suite's settings, plus the CORS origins the browser test's page is
served from (``RIVET_TEST_CORS_ORIGINS``, space-separated).
"""

import os

from tests.settings import *  # noqa: F403
from tests.settings import RIVET

RIVET = {
    **RIVET,
    "CORS_ALLOWED_ORIGINS": os.environ.get("RIVET_TEST_CORS_ORIGINS", "").split(),
}
