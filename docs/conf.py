"""Sphinx configuration of django-rivet's documentation site.

The pages stay Markdown (MyST-Parser), so they read the same on a code host
and merge like any text; `make docs` builds them strict (every warning is an
error), the way `make test` runs it. The API reference is generated from the
public surface's docstrings (api.md), which needs Django set up: a minimal
in-memory configuration below, no project required.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import django  # noqa: E402
from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure(
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "channels",
            "django_rivet",
        ],
        DATABASES={
            "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
        },
        CHANNEL_LAYERS={"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}},
        USE_TZ=True,
    )
    django.setup()

from django_rivet import __version__  # noqa: E402

project = "django-rivet"
author = "the django-rivet authors"
copyright = "django-rivet authors, MIT License"
release = __version__
version = ".".join(release.split(".")[:2])

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Headings get GitHub-style anchors (`quickstart.md#2-settings`), so links
# written for the code host work here too and a missing anchor is a warning.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

# Autodoc: documented members in source order; signatures keep their hints.
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

# Strict cross-references where they help: a reference written in a
# docstring (:func:, :mod:, :data:, :meth:, :attr:, :exc:) to a name of
# django-rivet must resolve. Class references are left out: most come from
# type hints in signatures (Django's, the standard library's, internal
# types), and the machine that builds these docs has no network to load the
# other projects' inventories (intersphinx), so they could not resolve.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:class", r".*"),
    (r"py:obj", r".*\.[A-Z]"),  # type variables (Generic[T] bases)
    (r"py:.*", r"(?!django_rivet\b).*\..*"),  # another package's dotted name
]

html_theme = "alabaster"
html_title = f"django-rivet {release}"
html_static_path: list[str] = []
html_theme_options = {
    "description": "Stateful actors and durable workflows for Django",
    "fixed_sidebar": True,
}
