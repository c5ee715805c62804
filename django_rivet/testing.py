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
    "freeze_time",
    "register_temporarily",
    "reset_actor_cache",
]


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
