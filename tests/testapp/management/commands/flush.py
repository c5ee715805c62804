"""``flush`` for the test suite: Django's static rows survive it.

pytest-django flushes the database after every transactional test, and
Django then sends ``post_migrate``, which re-creates every content type and
permission: 37 ms of a 40 ms flush on SQLite, paid by about a thousand tests
in each leg of ``make test``. Those rows come out the same every time, so
this flush empties every other table and keeps them (``post_migrate`` is
sent only if they are missing). The app's own commands take precedence over
Django's, and only the test settings install this app.
"""

from __future__ import annotations

from typing import Any

from django.core.management.color import no_style
from django.core.management.commands import flush
from django.core.management.sql import emit_post_migrate_signal
from django.db import connections

# Written by post_migrate only; nothing in the suite changes them.
KEPT = ("django_content_type", "auth_permission")


class Command(flush.Command):
    def handle(self, **options: Any) -> None:
        if options["interactive"]:
            return super().handle(**options)
        connection = connections[options["database"]]
        existing = connection.introspection.django_table_names(
            only_existing=True, include_views=False
        )
        if not set(KEPT) <= set(existing):
            # A database without them (a router sends them elsewhere).
            return super().handle(**options)
        tables = [table for table in existing if table not in KEPT]
        statements = connection.ops.sql_flush(
            no_style(),
            tables,
            reset_sequences=options.get("reset_sequences", True),
            allow_cascade=options.get("allow_cascade", False),
        )
        connection.ops.execute_sql_flush(statements)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT 1 FROM {KEPT[0]} LIMIT 1")
            kept = cursor.fetchone() is not None
        if not kept and not options.get("inhibit_post_migrate", False):
            # What Django's flush does last: re-create the missing rows.
            emit_post_migrate_signal(
                options["verbosity"], options["interactive"], options["database"]
            )
