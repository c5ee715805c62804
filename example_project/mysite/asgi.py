"""ASGI entry point: HTTP through Django, WebSockets through django-rivet."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402
from django_rivet.routing import (  # noqa: E402
    BodyLimitMiddleware,
    EmbeddedWorkerApp,
    websocket_urlpatterns,
)

# In development (RIVET["EMBEDDED_WORKER"]) the worker starts with the
# server; otherwise EmbeddedWorkerApp does nothing.
application = EmbeddedWorkerApp(
    ProtocolTypeRouter(
        {
            # Oversized bodies to the actor API are refused before Django reads them.
            "http": BodyLimitMiddleware(django_asgi_app),
            # AuthMiddlewareStack gives consumers the session user (ctx.user).
            "websocket": AuthMiddlewareStack(
                URLRouter([path("rivet/", URLRouter(websocket_urlpatterns))])
            ),
        }
    )
)
