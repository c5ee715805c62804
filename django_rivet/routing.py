"""WebSocket routes; mount under the same prefix as ``django_rivet.urls``."""

websocket_urlpatterns: list = []
