"""Settings of the daphne that PostgreSQL is restarted under (test_database_outage).

The suite's settings with persistent database connections, as production
runs them (``CONN_MAX_AGE=None``, no health checks): after the restart every
invocation thread holds a dead connection until it is used again.
"""

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES

DATABASES["default"]["CONN_MAX_AGE"] = None
