"""Fixtures of the workflow runtime's tests."""

from __future__ import annotations

import pytest

from django_rivet.workflows import live


@pytest.fixture(autouse=True)
def _live_windows_open():
    """Undo a worker shutdown of an earlier test (``live.end_all()``)."""
    live.reopen()
    yield
    live.reopen()
