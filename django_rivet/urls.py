"""HTTP routes of django-rivet; include under a prefix such as ``rivet/``."""

from django.urls import path  # noqa: F401

app_name = "django_rivet"

urlpatterns: list = []
