"""The admin's overview page, as a model the admin can register.

A proxy (no table of its own): registering it gives the page a place in
the admin index and a permission, ``django_rivet.view_overview``, which
superusers have and other staff users are granted like any other.
"""

from __future__ import annotations

from .workflows import Workflow


class Overview(Workflow):
    """What needs attention: failed and stuck work, queues, connections."""

    class Meta:
        proxy = True
        verbose_name = "overview"
        verbose_name_plural = "overview"
