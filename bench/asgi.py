"""ASGI application served by daphne in the benchmarks: the quickstart's stack.

The same layers as the quickstart's ``mysite/asgi.py`` (docs/quickstart.md):
``BodyLimitMiddleware`` in front of Django for HTTP, ``AuthMiddlewareStack``
(cookies, session, user) in front of every WebSocket route. The baselines'
routes sit behind the same layers, so both sides of a ratio pay for them.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from bench.site import BaselineConsumer, GroupConsumer, HotConsumer  # noqa: E402
from django_rivet.routing import (  # noqa: E402
    BodyLimitMiddleware,
    websocket_urlpatterns,
)

application = ProtocolTypeRouter(
    {
        "http": BodyLimitMiddleware(django_asgi_app),
        "websocket": AuthMiddlewareStack(
            URLRouter(
                [
                    path("baseline/ws", BaselineConsumer.as_asgi()),
                    path("baseline/group", GroupConsumer.as_asgi()),
                    path("baseline/hot/<str:key>", HotConsumer.as_asgi()),
                    path("rivet/", URLRouter(websocket_urlpatterns)),
                ]
            )
        ),
    }
)
