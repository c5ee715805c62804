"""Settings checks: unknown keys, types, CORS origins, interceptors (E001-E006).

Messages are module constants so tests compare them by equality.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.core.checks import Tags, register
from django.utils.module_loading import import_string

from .. import dispatch
from ..actors import interceptors
from ..conf import DEFAULTS, SETTINGS, docs_url, rivet_settings
from .base import message

E001 = "Unknown RIVET setting {key!r}."
E001_HINT = "Valid settings: {valid}."
E004 = "RIVET[{key!r}] must be {expected}."
E004_HINT = "See {docs} for the default and meaning of each setting."
E005 = "RIVET['CORS_ALLOWED_ORIGINS'] entry {origin!r} is not an origin."
E005_HINT = (
    "List each frontend origin as scheme://host[:port] (no path, no wildcard: "
    "credentials are allowed, so '*' would let any site act as the user)."
)
E006 = "RIVET['INTERCEPTORS'] entry {path!r} cannot be used: {error}"
E006_HINT = (
    "Each entry is the dotted path of a class (instantiated with no "
    "arguments) with an invoke(call, next) method. See {docs}"
)


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check the RIVET dict: unknown keys and value types."""
    errors: list[Any] = []
    valid = ", ".join(sorted(DEFAULTS))
    for key in rivet_settings.unknown_keys():
        errors.append(
            message("rivet.E001", E001.format(key=key), E001_HINT.format(valid=valid))
        )

    def bad(key: str, expected: str) -> None:
        text = E004.format(key=key, expected=expected)
        hint = E004_HINT.format(docs=docs_url("settings"))
        errors.append(message("rivet.E004", text, hint))

    # Types and ranges are declared once, with each setting (conf.SETTINGS).
    for key, expected in rivet_settings.problems("rivet.E004").items():
        bad(key, expected)
    dispatch_backend = rivet_settings.valid("DISPATCH_BACKEND")
    if dispatch_backend is not None and not _importable_backend(dispatch_backend):
        bad("DISPATCH_BACKEND", SETTINGS["DISPATCH_BACKEND"].kind.expected)
    errors += _check_cors_origins(rivet_settings.valid("CORS_ALLOWED_ORIGINS") or [])
    errors += _check_interceptors(rivet_settings.valid("INTERCEPTORS") or [])
    return errors


def _check_interceptors(paths: list[str]) -> list[Any]:
    """Check each of RIVET['INTERCEPTORS'] imports and intercepts."""
    errors = []
    for path in paths:
        try:
            interceptors.load([path])
        except Exception as exc:
            text = E006.format(path=path, error=exc)
            hint = E006_HINT.format(docs=docs_url("actors", "interceptors"))
            errors.append(message("rivet.E006", text, hint))
    return errors


def _check_cors_origins(origins: list[str]) -> list[Any]:
    """Check each of RIVET['CORS_ALLOWED_ORIGINS'] (its type is rivet.E004's)."""
    errors = []
    for origin in origins:
        parts = urlsplit(origin)
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or "*" in origin
            or parts.path not in ("", "/")
            or parts.query
            or parts.fragment
            or parts.username
        ):
            errors.append(message("rivet.E005", E005.format(origin=origin), E005_HINT))
    return errors


def _importable_backend(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    if value in dispatch.BACKENDS:
        return True
    try:
        import_string(value)
    except ImportError:
        return False
    return True
