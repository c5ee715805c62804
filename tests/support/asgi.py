"""ASGI application of the test suite: the quickstart's ``asgi.py``.

The same shape as README's quickstart and ``example_project/mysite/asgi.py``
(``AuthMiddlewareStack`` around the WebSocket routes), so every test that
starts a server (daphne or uvicorn) runs the stack users deploy.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django_asgi_app = get_asgi_application()

# Bind the shared tasks to the suite's Celery app (its broker comes from the
# settings), as a project's mysite/__init__.py does.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

import tests.support.celery_app  # noqa: E402, F401
from django_rivet.routing import (  # noqa: E402
    BodyLimitMiddleware,
    websocket_urlpatterns,
)

application = ProtocolTypeRouter(
    {
        # Oversized bodies to the actor API are refused before Django reads them.
        "http": BodyLimitMiddleware(django_asgi_app),
        # AuthMiddlewareStack gives consumers the session user (ctx.user).
        "websocket": AuthMiddlewareStack(
            URLRouter([path("rivet/", URLRouter(websocket_urlpatterns))])
        ),
    }
)
