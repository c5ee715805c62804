"""WebSocket routes; mount under the same prefix as ``django_rivet.urls``::

    URLRouter([path("rivet/", URLRouter(websocket_urlpatterns))])

Wrap the router in ``channels.auth.AuthMiddlewareStack`` to give actors the
session user (``ctx.user``, ``info.user`` in ``on_auth``).
"""

from django.urls import path

from .transport.consumer import RivetConsumer
from .transport.rivetkit.urls import websocket_urlpatterns as rivetkit_patterns

websocket_urlpatterns = [
    path("actors/<str:name>/connect", RivetConsumer.as_asgi()),
]

# The official RivetKit client's connections (gateway/{target}/connect).
websocket_urlpatterns += rivetkit_patterns
