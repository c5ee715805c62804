"""The Prometheus metrics URL of django-rivet; include it where it suits::

    path("metrics/", include("django_rivet.metrics"))

serves ``GET /metrics/`` to staff users and to the client addresses of
``RIVET["METRICS_ALLOWED_IPS"]`` (docs/observability.md).
"""

from django.urls import path

from .observability.views import metrics_view

app_name = "django_rivet_metrics"

urlpatterns = [
    path("", metrics_view, name="metrics"),
]
