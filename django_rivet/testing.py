"""Testing tools for projects using django-rivet (SPEC 7).

Also a pytest plugin: ``-p django_rivet.testing`` (or ``pytest_plugins``)
provides the ``rivet_clock`` fixture.
"""

from __future__ import annotations

from collections.abc import Iterator

from .actors.registry import register_temporarily
from .clock import VirtualClock, freeze_time

__all__ = [
    "VirtualClock",
    "close_db_connections",
    "freeze_time",
    "register_temporarily",
    "reset_actor_cache",
]


def close_db_connections() -> None:
    """Close database connections held by background threads.

    Async invocations run in worker threads, and the async ORM in asgiref's
    shared thread; both keep their connection open. PostgreSQL refuses to
    drop a test database while they do, so call this before teardown (the
    project's own test suite does it in a session fixture).
    """
    import asyncio

    from asgiref.sync import sync_to_async
    from django.db import connections

    from .actors.runtime import close_worker_connections

    close_worker_connections()
    # With no event loop running here, thread-sensitive code runs in
    # asgiref's single shared thread: close that thread's connection too.
    asyncio.run(sync_to_async(connections.close_all)())
    connections.close_all()


def reset_actor_cache() -> None:
    """Forget every actor instance loaded in this process (no hooks run).

    The next call loads the actor as a fresh process would: ``on_wake`` runs
    and the state is decoded from the database.
    """
    from .actors.runtime import clear_cache

    clear_cache()


try:  # the pytest plugin part, only when pytest is importable
    import pytest
except ImportError:  # pragma: no cover
    pass
else:

    @pytest.fixture
    def rivet_clock() -> Iterator[VirtualClock]:
        """A frozen virtual clock for the test (``.advance(seconds)``)."""
        with freeze_time() as clock:
            yield clock

    __all__ += ["rivet_clock"]
