"""Settings of tests/support/router_scenario.py: django-rivet in its own database.

Two databases, ``default`` (the project's) and ``rivet``; a router sends
every django_rivet model to ``rivet`` and migrates it only there, so a
runtime statement that used the default connection would find no table.
Test database names are distinct from the main suite's, which may be
running at the same time (PostgreSQL leg) -- pytest-django would drop it.
"""

import copy
import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, _test_db_dir

_default = copy.deepcopy(DATABASES["default"])
_default.pop("TEST", None)
if _default["ENGINE"].endswith("sqlite3"):
    _names = {
        alias: os.path.join(_test_db_dir, f"rivet-router-{alias}-{os.getpid()}.sqlite3")
        for alias in ("default", "rivet")
    }
else:
    _names = {alias: f"test_rivet_router_{alias}" for alias in ("default", "rivet")}
DATABASES = {
    alias: {**copy.deepcopy(_default), "TEST": {"NAME": name}}
    for alias, name in _names.items()
}


class RivetRouter:
    """django_rivet's models live in ``rivet``; everything else in ``default``."""

    def db_for_read(self, model, **hints):
        return "rivet" if model._meta.app_label == "django_rivet" else None

    db_for_write = db_for_read

    def allow_relation(self, first, second, **hints):
        return None

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        if app_label == "django_rivet":
            return db == "rivet"
        return db == "default"


DATABASE_ROUTERS = ["tests.settings.router.RivetRouter"]
