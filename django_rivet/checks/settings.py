"""Settings checks: unknown keys, value types, CORS origins (rivet.E001-E005).

Messages are module constants so tests compare them by equality.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.core.checks import Error, Tags, register
from django.utils.module_loading import import_string

from .. import dispatch
from ..conf import DEFAULTS, docs_url, rivet_settings

E001 = "Unknown RIVET setting {key!r}."
E001_HINT = "Valid settings: {valid}."
E004 = "RIVET[{key!r}] must be {expected}."
E004_HINT = "See {docs} for the default and meaning of each setting."
E005 = "RIVET['CORS_ALLOWED_ORIGINS'] entry {origin!r} is not an origin."
E005_HINT = (
    "List each frontend origin as scheme://host[:port] (no path, no wildcard: "
    "credentials are allowed, so '*' would let any site act as the user)."
)
_POSITIVE_NUMBERS = (
    "ACTION_TIMEOUT",
    "SLEEP_TIMEOUT",
    "SWEEP_INTERVAL",
    "WORKFLOW_LEASE_SECONDS",
    "WORKFLOW_POLL_INTERVAL",
    "EVENT_CHECK_INTERVAL",
    "SLOW_CONSUMER_TIMEOUT",
)
_POSITIVE_INTEGERS = (
    "MAX_INCOMING_MESSAGE_BYTES",
    "MAX_HTTP_BODY_BYTES",
    "MAX_OUTGOING_MESSAGE_BYTES",
    "EVENT_LOG_SIZE",
    "MAX_STATE_BYTES",
    "MAX_EVENT_BYTES",
    "CONNECTIONS_PER_PROCESS",
    "ACTOR_CACHE_SIZE",
    "ACTOR_CACHE_BYTES",
)
# None switches these off (no lock bound beyond the action timeout, no limit).
_OPTIONAL_POSITIVE_NUMBERS = ("LOCK_TIMEOUT",)
_OPTIONAL_POSITIVE_INTEGERS = ("MAX_CONNECTIONS_PER_ACTOR",)
_BOOLEANS = ("EXPOSE_ERRORS", "EMBEDDED_WORKER", "KV_ATOMIC_FLUSH")


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check the RIVET dict: unknown keys and value types."""
    errors: list[Any] = []
    valid = ", ".join(sorted(DEFAULTS))
    for key in rivet_settings.unknown_keys():
        errors.append(
            Error(
                E001.format(key=key),
                hint=E001_HINT.format(valid=valid),
                obj="settings.RIVET",
                id="rivet.E001",
            )
        )
    user = rivet_settings.user_settings

    def bad(key: str, expected: str) -> None:
        errors.append(
            Error(
                E004.format(key=key, expected=expected),
                hint=E004_HINT.format(docs=docs_url("settings")),
                obj="settings.RIVET",
                id="rivet.E004",
            )
        )

    for key in _POSITIVE_NUMBERS:
        if not _positive(user.get(key, DEFAULTS[key]), int | float):
            bad(key, "a positive number")
    for key in _POSITIVE_INTEGERS:
        if not _positive(user.get(key, DEFAULTS[key]), int):
            bad(key, "a positive integer")
    for key in _BOOLEANS:
        if not isinstance(user.get(key, DEFAULTS[key]), bool):
            bad(key, "True or False")
    for key in _OPTIONAL_POSITIVE_NUMBERS:
        value = user.get(key, DEFAULTS[key])
        if value is not None and not _positive(value, int | float):
            bad(key, "None or a positive number")
    for key in _OPTIONAL_POSITIVE_INTEGERS:
        value = user.get(key, DEFAULTS[key])
        if value is not None and not _positive(value, int):
            bad(key, "None or a positive integer")
    origins = user.get("ALLOWED_ORIGINS")
    if origins is not None and (
        not isinstance(origins, list | tuple)
        or not all(isinstance(o, str) for o in origins)
    ):
        bad("ALLOWED_ORIGINS", "None or a list of origin strings")
    dispatch_backend = user.get("DISPATCH_BACKEND")
    if dispatch_backend is not None and not _importable_backend(dispatch_backend):
        bad(
            "DISPATCH_BACKEND",
            "None, 'celery', 'worker', 'none' or the dotted path of a backend class",
        )
    docs = user.get("DOCS_URL", DEFAULTS["DOCS_URL"])
    if not isinstance(docs, str) or urlsplit(docs).scheme not in ("http", "https"):
        bad("DOCS_URL", "an http(s) URL")
    errors += _check_cors_origins(user.get("CORS_ALLOWED_ORIGINS", []), bad)
    return errors


def _positive(value: Any, kind: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, kind) and value > 0


def _check_cors_origins(origins: Any, bad: Any) -> list[Any]:
    """Check RIVET['CORS_ALLOWED_ORIGINS'] (the RivetKit-client endpoints)."""
    if not isinstance(origins, list | tuple) or not all(
        isinstance(o, str) for o in origins
    ):
        bad("CORS_ALLOWED_ORIGINS", "a list of origin strings")
        return []
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
            errors.append(
                Error(
                    E005.format(origin=origin),
                    hint=E005_HINT,
                    obj="settings.RIVET",
                    id="rivet.E005",
                )
            )
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
