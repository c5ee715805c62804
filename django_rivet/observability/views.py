"""The Prometheus scrape view, and who may read it.

Mount it with ``path("metrics/", include("django_rivet.metrics"))``. A
request is served when it comes from an active staff user (unless
``RIVET["METRICS_ALLOW_STAFF"]`` is False) or from a client address listed
in ``RIVET["METRICS_ALLOWED_IPS"]`` (addresses or networks); anything else
gets 403 and learns nothing. The address is ``REMOTE_ADDR``: behind a proxy
that is the proxy's, so list the scraper's route, not a forwarded header a
client could write itself.
"""

from __future__ import annotations

import ipaddress
import logging
from functools import lru_cache

from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.views.decorators.http import require_GET

from ..conf import rivet_settings
from . import metrics

__all__ = ["allowed", "allowed_networks", "metrics_view"]

logger = logging.getLogger("django_rivet.observability")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=8)
def _parse(entries: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)


def allowed_networks() -> tuple[Network, ...]:
    """Return ``METRICS_ALLOWED_IPS`` parsed (the check rivet.E801 vets it)."""
    return _parse(tuple(str(entry) for entry in rivet_settings.METRICS_ALLOWED_IPS))


def allowed(request: HttpRequest) -> bool:
    """Tell whether ``request`` may read the metrics."""
    user = getattr(request, "user", None)
    if (
        rivet_settings.METRICS_ALLOW_STAFF
        and user is not None
        and user.is_active
        and user.is_staff
    ):
        return True
    networks = allowed_networks()
    if not networks:
        return False
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in network for network in networks)


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Serve the metrics in Prometheus' text (or OpenMetrics) format."""
    if not allowed(request):
        return HttpResponseForbidden(
            "Metrics are served to staff users and to the addresses listed in "
            "RIVET['METRICS_ALLOWED_IPS'].",
            content_type="text/plain",
        )
    if not metrics.INSTALLED:
        return HttpResponse(
            "prometheus_client is not installed: pip install django-rivet[prometheus]",
            status=503,
            content_type="text/plain",
        )
    body, content_type = metrics.exposition(request.headers.get("Accept", ""))
    return HttpResponse(body, content_type=content_type)
