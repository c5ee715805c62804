"""Fixtures of the workflow engine suite: pure Python, no Django, no database."""

from __future__ import annotations

import pytest

from django_rivet.clock import freeze_time
from django_rivet.engine import InMemoryDriver

START = 1_700_000_000.0


@pytest.fixture(autouse=True)
def _fresh_actor_cache():
    """Shadow the root autouse fixture: the engine core never loads actors.

    The root one imports the actor runtime (and Django settings), which this
    suite must not need: it also runs with ``-p no:django``.
    """
    yield


@pytest.fixture(autouse=True)
def _dispatch_follows_the_settings():
    """Shadow the root autouse fixture: the engine core dispatches nothing.

    The root one imports the dispatch backends, and with them the models.
    """
    yield


@pytest.fixture
def clock():
    """A frozen virtual clock starting at ``START``."""
    with freeze_time(START) as frozen:
        yield frozen


@pytest.fixture
def driver(clock):
    """A fresh in-memory driver (time frozen)."""
    return InMemoryDriver()


@pytest.fixture(params=["yield", "live"])
def mode(request):
    """Run a test in both runner modes."""
    return request.param
