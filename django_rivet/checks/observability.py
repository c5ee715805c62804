"""Checks of the metrics view's access settings (rivet.E801, W801).

The settings' types are ``rivet.E004``'s (declared in ``conf``).

Messages are module constants so tests compare them by equality.
"""

from __future__ import annotations

import ipaddress
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


@register(Tags.security)
def check_metrics_access(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check who the metrics view lets in."""
    errors: list[Any] = []
    entries = rivet_settings.valid("METRICS_ALLOWED_IPS")
    if entries is None:
        return errors  # not a list (rivet.E004)
    for entry in entries:
        try:
            network = ipaddress.ip_network(str(entry), strict=False)
        except ValueError:
            network = None
        if network is None or not isinstance(entry, str):
            hint = E801_HINT.format(docs=docs_url("observability", "metrics"))
            errors.append(message("rivet.E801", E801.format(entry=entry), hint))
        elif network.prefixlen == 0:
            errors.append(message("rivet.W801", W801.format(entry=entry), W801_HINT))
    return errors
