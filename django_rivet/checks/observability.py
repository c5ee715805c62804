"""Checks of the metrics view's access settings (rivet.E004, E801, W801).

Messages are module constants so tests compare them by equality.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from django.core.checks import Error, Tags, Warning, register

from ..conf import DEFAULTS, docs_url, rivet_settings
from .settings import E004, E004_HINT

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
    user = rivet_settings.user_settings
    errors: list[Any] = []
    staff = user.get("METRICS_ALLOW_STAFF", DEFAULTS["METRICS_ALLOW_STAFF"])
    if not isinstance(staff, bool):
        errors.append(_type_error("METRICS_ALLOW_STAFF", "True or False"))
    entries = user.get("METRICS_ALLOWED_IPS", DEFAULTS["METRICS_ALLOWED_IPS"])
    if not isinstance(entries, list | tuple):
        errors.append(
            _type_error("METRICS_ALLOWED_IPS", "a list of IP addresses or networks")
        )
        return errors
    for entry in entries:
        try:
            network = ipaddress.ip_network(str(entry), strict=False)
        except ValueError:
            network = None
        if network is None or not isinstance(entry, str):
            errors.append(
                Error(
                    E801.format(entry=entry),
                    hint=E801_HINT.format(docs=docs_url("observability", "metrics")),
                    obj="settings.RIVET",
                    id="rivet.E801",
                )
            )
        elif network.prefixlen == 0:
            errors.append(
                Warning(
                    W801.format(entry=entry),
                    hint=W801_HINT,
                    obj="settings.RIVET",
                    id="rivet.W801",
                )
            )
    return errors


def _type_error(key: str, expected: str) -> Error:
    return Error(
        E004.format(key=key, expected=expected),
        hint=E004_HINT,
        obj="settings.RIVET",
        id="rivet.E004",
    )
