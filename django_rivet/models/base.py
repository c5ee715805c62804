"""What every model module shares: the clock-following default for timestamps."""

from __future__ import annotations

from typing import Any

from .. import clock

__all__ = ["now"]


def now() -> Any:
    """Return the project clock's now (record timestamps follow frozen time)."""
    return clock.now_datetime()
