"""What django-rivet's management commands share.

- **Output that cannot drive a terminal.** Ids, names, keys and values are
  anyone's input (a client chooses an actor key, a workflow id, a message
  name): :class:`RivetCommand` writes through streams that show control
  characters (ESC sequences, carriage returns, DEL, C1 controls) and the
  invisible Unicode controls that reorder text as escapes, so nothing
  printed can move the cursor, retitle the window or hide what follows.
  :func:`printable` also escapes tabs and newlines, for a value printed
  inside a line (a column of ``rivet_workflows list``).
- **Arguments checked into** :class:`CommandError`: :func:`bounded_int`,
  :func:`bounded_float` and :func:`parse_duration` refuse values out of
  their range before anything runs (a limit past 64 bits used to end in a
  database ``OverflowError`` and its traceback).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import Any, TextIO, cast

from django.core.management.base import BaseCommand, CommandError, OutputWrapper

__all__ = [
    "INT64_MAX",
    "MAX_DURATION",
    "RivetCommand",
    "bounded_float",
    "bounded_int",
    "parse_duration",
    "printable",
]

INT64_MAX = 2**63 - 1
#: The longest ``--older-than``: 100 years (longer reaches before any row).
MAX_DURATION = 100 * 365 * 86400.0

# Unicode "format" controls that reorder or hide text (bidirectional
# embeddings, overrides and isolates, zero-width characters, the BOM).
_INVISIBLE = (
    *range(0x200B, 0x2010),
    *range(0x202A, 0x202F),
    *range(0x2060, 0x2065),
    *range(0x2066, 0x206A),
    0xFEFF,
)
_IN_LINE = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))}
_IN_LINE.update({code: f"\\u{code:04x}" for code in _INVISIBLE})
# What a whole write may keep: its own line breaks and tabs.
_IN_TEXT = {code: text for code, text in _IN_LINE.items() if code not in (9, 10)}


def printable(value: Any) -> str:
    """Return ``str(value)`` with every control character shown as an escape.

    For a value printed inside a line: tabs and newlines are escaped too.
    """
    return str(value).translate(_IN_LINE)


class EscapingOutput(OutputWrapper):
    """An ``OutputWrapper`` that escapes control characters in what it writes.

    Line breaks and tabs pass (a command's own layout); the style (colour)
    is applied after the escaping, so its own escapes do reach the terminal.
    """

    def write(  # type: ignore[override]
        self,
        msg: str = "",
        style_func: Callable[[str], str] | None = None,
        ending: str | None = None,
    ) -> None:
        """Write ``msg`` with its control characters escaped."""
        super().write(msg.translate(_IN_TEXT), style_func, ending)


def _escaping(wrapper: OutputWrapper) -> EscapingOutput:
    if isinstance(wrapper, EscapingOutput):
        return wrapper
    escaping = EscapingOutput(cast(TextIO, wrapper._out), ending=wrapper.ending)
    escaping.style_func = wrapper.style_func
    return escaping


class _EscapingStream:
    """A command's ``stdout`` or ``stderr``: whatever is assigned is wrapped."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.attribute = f"_rivet_{name}"

    def __get__(self, command: Any, owner: type | None = None) -> OutputWrapper:
        wrapper: OutputWrapper = getattr(command, self.attribute)
        return wrapper

    def __set__(self, command: Any, wrapper: OutputWrapper) -> None:
        setattr(command, self.attribute, _escaping(wrapper))


class RivetCommand(BaseCommand):
    """A command whose ``stdout`` and ``stderr`` escape control characters.

    Django assigns the streams in ``__init__`` and again in ``execute()``
    (``call_command(stdout=...)``); each assignment is wrapped here, and so
    is what Django writes itself (a ``CommandError``'s message).
    """

    stdout = _EscapingStream()
    stderr = _EscapingStream()


def _number(text: str, kind: type[int] | type[float]) -> Any:
    try:
        return kind(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def bounded_int(low: int, high: int = INT64_MAX) -> Callable[[str], int]:
    """Return an argparse ``type`` taking integers from ``low`` to ``high``.

    A value out of range is an argparse error: a :class:`CommandError`
    from ``call_command``, the usage line from the command line.
    """

    def parse(text: str) -> int:
        value = _number(text, int)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is not from {low} to {high}")
        return int(value)

    parse.__name__ = "integer"
    return parse


def bounded_float(low: float, high: float) -> Callable[[str], float]:
    """Return an argparse ``type`` taking finite numbers in (``low``, ``high``]."""

    def parse(text: str) -> float:
        value = _number(text, float)
        if not (math.isfinite(value) and low < value <= high):
            raise argparse.ArgumentTypeError(
                f"{text} is not a number above {low:g} and at most {high:g}"
            )
        return float(value)

    parse.__name__ = "number"
    return parse


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(text: str) -> float:
    """Return seconds for ``90``, ``90s``, ``15m``, ``12h``, ``7d`` or ``2w``.

    Raises :class:`CommandError` for anything else, and past
    :data:`MAX_DURATION`.
    """
    found = _DURATION.match(text or "")
    if found is None:
        raise CommandError(
            f"Cannot read the duration {printable(text)!r}: use a number of "
            "seconds or a number with s, m, h, d or w (e.g. 12h, 7d)"
        )
    seconds = float(found.group(1)) * _UNITS[found.group(2) or "s"]
    if seconds > MAX_DURATION:
        raise CommandError(f"The duration {text.strip()} is over 100 years")
    return seconds
