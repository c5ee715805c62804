"""What the wire may show of an exception raised while running actor code."""

from __future__ import annotations

import logging

from ..conf import rivet_settings
from ..exceptions import InternalError, RivetError

logger = logging.getLogger("django_rivet.actors")

__all__ = ["public_error"]


def public_error(exc: BaseException) -> RivetError:
    """Map any exception to what the wire may show; log internal ones."""
    if isinstance(exc, RivetError):
        return exc
    logger.error("internal error in actor code", exc_info=exc)
    if rivet_settings.EXPOSE_ERRORS:
        return InternalError(f"{type(exc).__name__}: {exc}")
    return InternalError()
