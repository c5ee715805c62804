"""The checks on the database django-rivet's models are routed to (rivet.E4xx, W401)."""

import io

import pytest
from django.core import checks
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.test import override_settings

from django_rivet import checks as rivet_checks

# pg: the PostgreSQL leg runs this module (the checks read each database's
# migrations and version).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


# -- checks --------------------------------------------------------------------------
def rivet_ids(messages):
    return sorted(m.id for m in messages if m.id and m.id.startswith("rivet."))


def test_unapplied_migrations_are_w401_with_the_database_tag():
    assert rivet_ids(checks.run_checks(databases=["default"])) == []
    # The latest migration: an earlier one unrecorded below an applied one
    # is no plan to run.
    [(_, latest)] = MigrationLoader(connection).graph.leaf_nodes("django_rivet")
    MigrationRecorder(connection).migration_qs.filter(
        app="django_rivet", name=latest
    ).delete()
    messages = checks.run_checks(databases=["default"])
    [warning] = [m for m in messages if m.id == "rivet.W401"]
    assert warning.msg == rivet_checks.W401.format(alias="default", names=latest)
    assert rivet_ids(checks.run_checks()) == []  # only with --database


def test_migrate_does_not_warn_about_the_migrations_it_applies():
    [(_, latest)] = MigrationLoader(connection).graph.leaf_nodes("django_rivet")
    MigrationRecorder(connection).migration_qs.filter(
        app="django_rivet", name=latest
    ).delete()
    out, err = io.StringIO(), io.StringIO()
    # --fake: the tables are there; only the record is missing.
    call_command(
        "migrate", "django_rivet", fake=True, skip_checks=False, stdout=out, stderr=err
    )
    assert "rivet.W401" not in out.getvalue() + err.getvalue()
    assert f"Applying django_rivet.{latest}... FAKED" in out.getvalue()
    assert rivet_ids(checks.run_checks(databases=["default"])) == []


def test_an_unsupported_backend_is_e401(monkeypatch):
    monkeypatch.setattr(connection, "vendor", "oracle")
    [error] = [m for m in checks.run_checks() if m.id == "rivet.E401"]
    assert error.msg == rivet_checks.E401.format(alias="default", vendor="oracle")


@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="SQLite only")
def test_sqlite_older_than_3_35_is_e402(monkeypatch):
    monkeypatch.setattr("sqlite3.sqlite_version_info", (3, 31, 1))
    [error] = [m for m in checks.run_checks() if m.id == "rivet.E402"]
    assert error.msg == rivet_checks.E402.format(alias="default", version="3.31.1")


class SplitRouter:
    """Sends workflows elsewhere: no transaction could span both."""

    def db_for_write(self, model, **hints):
        return "other" if model._meta.model_name == "workflow" else None

    db_for_read = db_for_write


@override_settings(DATABASE_ROUTERS=["tests.checks.test_database.SplitRouter"])
def test_routers_splitting_the_models_are_e403():
    [error] = [m for m in checks.run_checks() if m.id == "rivet.E403"]
    assert "django_rivet.Workflow write -> other" in error.msg
    assert "django_rivet.Actor write -> default" in error.msg


@pytest.mark.parametrize("rivet", [{"MAX_STATE_BYTES": 0}, {"LOCK_TIMEOUT": -1}])
def test_bad_state_and_lock_limits_are_e004(rivet):
    with override_settings(RIVET=rivet):
        assert rivet_ids(checks.run_checks()) == ["rivet.E004"]
