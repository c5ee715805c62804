import multiprocessing

import pytest

# Forked live servers hang in sync_to_async after consumer tests (see
# ENVIRONMENT.md); spawned processes start clean.
multiprocessing.set_start_method("spawn", force=True)

pytest_plugins = ["django_rivet.testing"]


@pytest.fixture(autouse=True)
def _fresh_actor_cache():
    """Each test starts with no actor loaded in this process."""
    from django_rivet.testing import reset_actor_cache

    reset_actor_cache()
    yield
    reset_actor_cache()
