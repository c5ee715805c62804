"""WebSocket routes and the HTTP body limit, for the project's ``asgi.py``::

    application = ProtocolTypeRouter({
        "http": BodyLimitMiddleware(django_asgi_app),
        "websocket": AuthMiddlewareStack(
            URLRouter([path("rivet/", URLRouter(websocket_urlpatterns))])
        ),
    })

Mount the WebSocket patterns under the same prefix as ``django_rivet.urls``.
``BodyLimitMiddleware`` refuses oversized bodies to django-rivet's HTTP routes
before Django reads them (other routes pass untouched).
``channels.auth.AuthMiddlewareStack`` gives actors the session user
(``ctx.user``, ``info.user`` in ``on_auth``).
"""

from django.urls import path

from .transport.consumer import RivetConsumer
from .transport.limits import BodyLimitMiddleware
from .transport.rivetkit.urls import websocket_urlpatterns as rivetkit_patterns

__all__ = ["BodyLimitMiddleware", "websocket_urlpatterns"]

websocket_urlpatterns = [
    path("actors/<str:name>/connect", RivetConsumer.as_asgi()),
]

# The official RivetKit client's connections (gateway/{target}/connect).
websocket_urlpatterns += rivetkit_patterns
