"""WebSocket routes and ASGI wrappers, for the project's ``asgi.py``::

    application = EmbeddedWorkerApp(ProtocolTypeRouter({
        "http": BodyLimitMiddleware(django_asgi_app),
        "websocket": AuthMiddlewareStack(
            URLRouter([path("rivet/", URLRouter(websocket_urlpatterns))])
        ),
    }))

Mount the WebSocket patterns under the same prefix as ``django_rivet.urls``.
``BodyLimitMiddleware`` refuses oversized bodies to django-rivet's HTTP routes
before Django reads them (other routes pass untouched).
``channels.auth.AuthMiddlewareStack`` gives actors the session user
(``ctx.user``, ``info.user`` in ``on_auth``). ``EmbeddedWorkerApp`` starts
the embedded worker (``RIVET["EMBEDDED_WORKER"]``, development) with the
server -- on the ASGI lifespan startup where the server sends one
(uvicorn), else with the first connection, HTTP or WebSocket (daphne) --
and does nothing when the setting is off.

Import this module after ``get_asgi_application()`` has set Django up: its
routes import the models. Servers (daphne, uvicorn) run no system checks,
so importing it logs, at ERROR, what ``manage.py check`` would say about
the channel layer (``rivet.E002``, ``E003``, ``E601``): without one no
WebSocket can be served.
"""

import logging

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

if not apps.ready:
    # The mistake is in the project's asgi.py, whose import order looks
    # arbitrary; Django's own message ("Apps aren't loaded yet", or settings
    # "not configured") names none of it.
    raise ImproperlyConfigured(
        "django_rivet.routing was imported before Django was set up. In "
        "asgi.py, call `django_asgi_app = get_asgi_application()` first and "
        "import django_rivet.routing (and channels.auth) below that line, "
        "with `# noqa: E402` if a linter complains. See the quickstart's "
        "asgi.py."
    )

from django.core.checks import Error  # noqa: E402
from django.urls import path, re_path  # noqa: E402

from .checks.runtime import check_channels  # noqa: E402
from .checks.transport import check_channel_layer  # noqa: E402
from .transport.consumer import RivetConsumer  # noqa: E402
from .transport.limits import BodyLimitMiddleware  # noqa: E402
from .transport.raw import RivetKitRawConsumer, RivetRawConsumer  # noqa: E402
from .transport.rivetkit.urls import (  # noqa: E402
    websocket_urlpatterns as rivetkit_patterns,
)
from .upkeep.worker import EmbeddedWorkerApp  # noqa: E402

__all__ = ["BodyLimitMiddleware", "EmbeddedWorkerApp", "websocket_urlpatterns"]

websocket_urlpatterns = [
    path("actors/<str:name>/connect", RivetConsumer.as_asgi()),
    # Raw WebSockets to on_websocket (the rest of the path is the actor's).
    re_path(r"^actors/(?P<name>[^/]+)/websocket(?:/.*)?$", RivetRawConsumer.as_asgi()),
]

# The official RivetKit client's connections (gateway/{target}/connect),
# and its raw WebSockets (handle.webSocket(path): gateway/{target}/websocket).
websocket_urlpatterns += rivetkit_patterns
websocket_urlpatterns += [
    re_path(
        r"^gateway/(?P<target>[^/]+)/websocket(?:/.*)?$",
        RivetKitRawConsumer.as_asgi(),
    ),
]


def report_channel_layer_errors() -> None:
    """Log the channel layer's system-check errors (once, where a server loads us)."""
    logger = logging.getLogger("django_rivet.transport")
    found = check_channels()
    if not found:
        # Only once the alias exists: E601 tries to create the layer.
        found = check_channel_layer()
    for message in found:
        if isinstance(message, Error):
            logger.error("%s %s HINT: %s", message.id, message.msg, message.hint)


report_channel_layer_errors()
