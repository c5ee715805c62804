"""ASGI application of the transport benchmark (served by daphne)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.transport_settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from bench.transport_site import BaselineConsumer  # noqa: E402
from django_rivet.routing import (  # noqa: E402
    BodyLimitMiddleware,
    websocket_urlpatterns,
)

# The quickstart's layers, as in bench/asgi.py.
application = ProtocolTypeRouter(
    {
        "http": BodyLimitMiddleware(django_asgi_app),
        "websocket": AuthMiddlewareStack(
            URLRouter(
                [
                    path("baseline/ws", BaselineConsumer.as_asgi()),
                    path("rivet/", URLRouter(websocket_urlpatterns)),
                ]
            )
        ),
    }
)
