"""Routes of the RivetKit-client endpoints, relative to django-rivet's prefix.

``django_rivet.urls`` and ``django_rivet.routing`` include them, so mounting
django-rivet at ``rivet/`` serves ``createClient("http://host/rivet")``.
``DELETE actors/{id}`` shares its path with django-rivet's own
``actors/{name}`` route, which :func:`.manager.destroy_or` wraps.
"""

from django.urls import path, re_path

from . import http, manager
from .consumer import RivetKitConsumer

__all__ = ["urlpatterns", "websocket_urlpatterns"]

urlpatterns = [
    path("metadata", manager.metadata_view, name="rivetkit-metadata"),
    path("actors", manager.actors_view, name="rivetkit-actors"),
    path(
        "gateway/<str:target>/action/<str:action>",
        http.gateway_action_view,
        name="rivetkit-action",
    ),
    path(
        "gateway/<str:target>/queue/<str:queue>",
        http.gateway_queue_view,
        name="rivetkit-queue",
    ),
    re_path(
        r"^gateway/(?P<target>[^/]+)/request(?:/(?P<path>.*))?$",
        http.gateway_request_view,
        name="rivetkit-request",
    ),
    re_path(
        r"^gateway/(?P<target>[^/]+)(?:/(?P<rest>.*))?$",
        http.gateway_unknown_view,
        name="rivetkit-gateway",
    ),
]

websocket_urlpatterns = [
    re_path(r"^gateway/(?P<target>[^/]+)/connect$", RivetKitConsumer.as_asgi()),
]
