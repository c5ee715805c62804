"""What the check modules share: building a message from its id and texts."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Warning

__all__ = ["message"]

# The letter after "rivet." says the level, as docs/checks.md lists them.
_LEVELS: dict[str, type[Error] | type[Warning]] = {"E": Error, "W": Warning}


def message(id: str, text: str, hint: str, obj: Any = "settings.RIVET") -> CheckMessage:
    """Return the check message ``id`` (``rivet.E...`` an Error, ``W`` a Warning).

    ``text`` and ``hint`` are the module constants of ``id``, formatted;
    ``obj`` is what the message is about (most are about ``settings.RIVET``).
    """
    level = _LEVELS[id.removeprefix("rivet.")[0]]
    return level(text, hint=hint, obj=obj, id=id)
