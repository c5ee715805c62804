"""Checks of the metrics view's access settings (rivet.E801, E802, W801, W802).

The settings' types are ``rivet.E004``'s (declared in ``conf``).

Messages are module constants so tests compare them by equality.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from typing import Any

from django.core.checks import Tags, register

from ..conf import docs_url, rivet_settings
from .base import message

E801 = "RIVET['METRICS_ALLOWED_IPS'] entry {entry!r} is not an IP address or network."
E801_HINT = (
    "List the addresses your Prometheus scrapes from, e.g. '127.0.0.1' or "
    "'10.0.0.0/8'. See {docs}"
)
W801 = "RIVET['METRICS_ALLOWED_IPS'] allows every address ({entry!r})."
W801_HINT = (
    "Anyone who reaches the server can read the metrics (actor, action and "
    "workflow names, traffic). List the scrapers' addresses instead."
)


E802 = "RIVET['TRUSTED_PROXIES'] entry {entry!r} is not an IP address or network."
E802_HINT = (
    "List the addresses of the proxies in front of the server, e.g. "
    "'127.0.0.1' for a proxy on the same host. See {docs}"
)
W802 = (
    "RIVET['METRICS_ALLOWED_IPS'] is set and the server takes client "
    "addresses from X-Forwarded-For ({sign})."
)
W802_HINT = (
    "The server then replaces REMOTE_ADDR with what the header says, which "
    "any client can write; the metrics view admits no address from such "
    "requests. Run daphne without --proxy-headers (uvicorn with "
    "--no-proxy-headers or FORWARDED_ALLOW_IPS='') and list the proxies in "
    "RIVET['TRUSTED_PROXIES']. See {docs}"
)
# What shows that the ASGI server reads forwarding headers, where the checks
# run: its command line (checks run in the server's own process only with
# runserver, or when a project runs them at start-up) and uvicorn's
# environment variable.
_REWRITE_FLAGS = ("--proxy-headers", "--forwarded-allow-ips")


def _networks(key: str, error: str, text: str, hint: str) -> list[Any]:
    """Return E801/E802 for the entries of ``key`` that are no address."""
    entries = rivet_settings.valid(key)
    if entries is None:
        return []  # not a list (rivet.E004)
    errors: list[Any] = []
    for entry in entries:
        if _network(entry) is None:
            shown = hint.format(docs=docs_url("observability", "metrics"))
            errors.append(message(error, text.format(entry=entry), shown))
    return errors


def _network(entry: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    if not isinstance(entry, str):
        return None
    try:
        return ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return None


def rewrite_sign() -> str | None:
    """Say what shows that the server reads X-Forwarded-For, if anything does."""
    for flag in _REWRITE_FLAGS:
        if any(arg == flag or arg.startswith(flag + "=") for arg in sys.argv):
            return f"{flag} on the command line"
    if os.environ.get("FORWARDED_ALLOW_IPS"):
        return "the FORWARDED_ALLOW_IPS environment variable"
    return None


@register(Tags.security)
def check_metrics_access(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check who the metrics view lets in, and whose addresses it believes."""
    errors = _networks("METRICS_ALLOWED_IPS", "rivet.E801", E801, E801_HINT)
    errors += _networks("TRUSTED_PROXIES", "rivet.E802", E802, E802_HINT)
    entries = rivet_settings.valid("METRICS_ALLOWED_IPS") or []
    for entry in entries:
        network = _network(entry)
        if network is not None and network.prefixlen == 0:
            errors.append(message("rivet.W801", W801.format(entry=entry), W801_HINT))
    sign = rewrite_sign()
    if entries and sign is not None:
        hint = W802_HINT.format(docs=docs_url("observability", "metrics"))
        errors.append(message("rivet.W802", W802.format(sign=sign), hint))
    return errors
