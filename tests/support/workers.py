"""Code run in spawned OS processes by the concurrency tests."""

import os


def setup_django(db_name: str) -> None:
    """Configure Django in a fresh process against the test database."""
    os.environ["RIVET_SERVER_DB_NAME"] = db_name
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()


def increment_many(db_name: str, key: str, times: int, start_event) -> int:
    """Increment the counter actor ``key`` ``times`` times; return the last value."""
    setup_django(db_name)
    from django.db import connections

    from django_rivet import actors

    handle = actors.get_or_create("counter", key)
    start_event.wait(30)
    last = 0
    for _ in range(times):
        last = handle.call("increment")
    connections.close_all()
    return last
