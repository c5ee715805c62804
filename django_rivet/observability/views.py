"""The Prometheus scrape view, and who may read it.

Mount it with ``path("metrics/", include("django_rivet.metrics"))``. A
request is served when it comes from an active staff user (unless
``RIVET["METRICS_ALLOW_STAFF"]`` is False) or from a client address listed
in ``RIVET["METRICS_ALLOWED_IPS"]`` (addresses or networks); anything else
gets 403 and learns nothing.

The client address (:func:`client_address`) is ``REMOTE_ADDR`` -- unless
the request carries a forwarding header (``X-Forwarded-For``,
``X-Real-IP``, ``Forwarded``), which anyone can write:

- when ``REMOTE_ADDR`` is itself listed in that header, the ASGI server took
  it from there (daphne ``--proxy-headers`` takes the header's first entry,
  uvicorn trusts ``--forwarded-allow-ips``, 127.0.0.1 by default): the
  real peer is unknown, no address is admitted (logged once per process);
- when ``REMOTE_ADDR`` is a proxy listed in ``RIVET["TRUSTED_PROXIES"]``,
  the client is the last ``X-Forwarded-For`` entry that is not a trusted
  proxy (read from the right: each trusted proxy appends what it saw);
- otherwise the peer may be a proxy that is not trusted: no address is
  admitted.
"""

from __future__ import annotations

import ipaddress
import logging
from functools import lru_cache

from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.views.decorators.http import require_GET

from ..conf import rivet_settings
from . import metrics

__all__ = ["allowed", "allowed_networks", "client_address", "metrics_view"]

logger = logging.getLogger("django_rivet.observability")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# The headers proxies (and anyone) write to name a client, as request.META
# keys; what the ASGI servers read to replace the peer's address.
FORWARDING_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_X_REAL_IP", "HTTP_FORWARDED")
_warned_rewrite = False


@lru_cache(maxsize=8)
def _parse(entries: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)


def allowed_networks() -> tuple[Network, ...]:
    """Return ``METRICS_ALLOWED_IPS`` parsed (the check rivet.E801 vets it)."""
    return _parse(tuple(str(entry) for entry in rivet_settings.METRICS_ALLOWED_IPS))


def trusted_proxies() -> tuple[Network, ...]:
    """Return ``TRUSTED_PROXIES`` parsed (the check rivet.E802 vets it)."""
    return _parse(tuple(str(entry) for entry in rivet_settings.TRUSTED_PROXIES))


def _address(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


def _within(address: Address, networks: tuple[Network, ...]) -> bool:
    return any(address in network for network in networks)


def client_address(request: HttpRequest) -> Address | None:
    """Return the client's address as the module docstring says, or None.

    None when it cannot be known: a forwarding header the server may have
    read, or one sent through (or by) a peer that is not a trusted proxy.
    """
    peer = _address(str(request.META.get("REMOTE_ADDR", "")))
    if peer is None:
        return None
    headers = [request.META.get(name) for name in FORWARDING_HEADERS]
    if not any(headers):
        return peer
    forwarded, real_ip = headers[0] or "", headers[1] or ""
    hops = [_address(part) for part in forwarded.split(",") if part.strip()]
    if peer in hops or _address(real_ip) == peer:
        _rewritten(peer)
        return None
    proxies = trusted_proxies()
    if not proxies or not _within(peer, proxies):
        return None
    for hop in reversed(hops):
        if hop is None:
            return None  # an entry no proxy of ours wrote
        if not _within(hop, proxies):
            return hop
    return None


def _rewritten(peer: Address) -> None:
    global _warned_rewrite
    if _warned_rewrite:
        return
    _warned_rewrite = True
    logger.warning(
        "the ASGI server took REMOTE_ADDR=%s from a forwarding header "
        "(daphne --proxy-headers, uvicorn --forwarded-allow-ips): the metrics "
        "view admits no address from such requests; run the server without "
        "proxy headers and list the proxies in RIVET['TRUSTED_PROXIES']",
        peer,
    )


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
    address = client_address(request)
    return address is not None and _within(address, networks)


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
