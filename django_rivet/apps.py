"""App configuration: autodiscovery of actor and workflow modules."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class RivetConfig(AppConfig):
    """Discover ``actors.py`` and ``workflows.py`` in every installed app."""

    name = "django_rivet"
    label = "django_rivet"
    verbose_name = "Rivet actors and workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # No database I/O here, and safe to run twice: registering the same
        # class again is a no-op.
        from . import checks  # noqa: F401  (registers the system checks)
        from .actors import registry

        autodiscover_modules("actors", "workflows")
        registry.register_discovered()
        from .workflow_runtime import registry as workflow_registry

        workflow_registry.discover()

        # RIVET["EMBEDDED_WORKER"]: the worker thread starts with the first
        # request this process serves (never in commands or tests otherwise).
        from .worker import connect_embedded_worker

        connect_embedded_worker()
