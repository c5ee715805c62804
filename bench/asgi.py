"""ASGI application served by daphne in the transport benchmarks."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from bench.site import BaselineConsumer, GroupConsumer  # noqa: E402
from django_rivet.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": URLRouter(
            [
                path("baseline/ws", BaselineConsumer.as_asgi()),
                path("baseline/group", GroupConsumer.as_asgi()),
                path("rivet/", URLRouter(websocket_urlpatterns)),
            ]
        ),
    }
)
