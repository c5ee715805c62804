"""HTTP routes of django-rivet (docs/protocol.md); include under a prefix::

path("rivet/", include("django_rivet.urls"))
"""

from django.urls import path, re_path

from .transport import actor_events, http, openapi, workflow_streams
from .transport.rivetkit import manager as rivetkit_manager
from .transport.rivetkit import urls as rivetkit_urls

app_name = "django_rivet"

urlpatterns = [
    # DELETE actors/{id} is the RivetKit client's (transport/rivetkit).
    path(
        "actors/<str:name>",
        rivetkit_manager.destroy_or(http.actor_view),
        name="actor",
    ),
    path("actors/<str:name>/actions/<str:action>", http.action_view, name="action"),
    path("actors/<str:name>/queue/<str:queue>", http.queue_view, name="queue"),
    # Server-Sent Events (transport/sse.py): an actor's events, a workflow's stream.
    path(
        "actors/<str:name>/events", actor_events.actor_events_view, name="actor_events"
    ),
    path(
        "workflows/<str:workflow_id>/streams/<str:key>",
        workflow_streams.workflow_stream_view,
        name="workflow_stream",
    ),
    re_path(
        r"^actors/(?P<name>[^/]+)/request(?:/(?P<path>.*))?$",
        http.request_view,
        name="request",
    ),
    # Off (404) unless RIVET["OPENAPI"] says who may read it.
    path("openapi.json", openapi.openapi_view, name="openapi"),
]

# The official RivetKit client's endpoints, under the same prefix.
urlpatterns += rivetkit_urls.urlpatterns
