"""Gateway tokens kept out of paths and log lines.

The RivetKit client puts its token in URLs -- ``gateway/{actor_id}@{token}/...``
and ``?rvt-token=`` -- so every path handed to code and every access log
would keep it. :func:`mask_tokens` masks both forms; the logging filter
:class:`MaskGatewayTokens` does it for the loggers that write request lines
(uvicorn's ``uvicorn.access``, Django's ``django.request`` and
``django.server``), and ``python -m django_rivet.tokens`` for a log piped
through it (daphne's access log, which does not go through :mod:`logging`);
docs/security.md says how to use them.

This module imports nothing but the standard library, so ``LOGGING`` can
name the filter before Django is set up.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["MaskGatewayTokens", "main", "mask_query", "mask_tokens"]

#: What a token is replaced with.
MASK = "***"
# The token segment of a gateway path, and the token of a gateway query.
_PATH_TOKEN = re.compile(r"(/gateway/[^/?#@\s\"]*)@[^/?#\s\"]*")
_QUERY_TOKEN = re.compile(r"((?:^|[?&])rvt-token=)[^&#\s\"]*")


def mask_tokens(text: str) -> str:
    """Return ``text`` -- a path, a URI, a log line -- with gateway tokens masked.

    ``/rivet/gateway/{id}@{token}/action/x?rvt-token={token}`` becomes
    ``/rivet/gateway/{id}@***/action/x?rvt-token=***``; other text is
    returned as it is.
    """
    if "@" in text:
        text = _PATH_TOKEN.sub(r"\1@" + MASK, text)
    if "rvt-token=" in text:
        text = _QUERY_TOKEN.sub(r"\1" + MASK, text)
    return text


def mask_query(query: str) -> str:
    """Return a query string (without its ``?``) with ``rvt-token`` masked."""
    return _QUERY_TOKEN.sub(r"\1" + MASK, query) if "rvt-token=" in query else query


class MaskGatewayTokens(logging.Filter):
    """Mask gateway tokens in the records a logger or handler passes on."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask the message and its string arguments; keep the record."""
        if isinstance(record.msg, str):
            record.msg = mask_tokens(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_masked(arg) for arg in record.args)
        elif isinstance(record.args, Mapping):
            record.args = {key: _masked(arg) for key, arg in record.args.items()}
        return True


def _masked(value: Any) -> Any:
    return mask_tokens(value) if isinstance(value, str) else value


def main() -> None:
    """Copy standard input to standard output, line by line, tokens masked.

    For access logs that do not go through :mod:`logging` (daphne's)::

        daphne --access-log /dev/stdout mysite.asgi:application \
            | python -m django_rivet.tokens
    """
    for line in sys.stdin:
        sys.stdout.write(mask_tokens(line))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
