import multiprocessing

import pytest

# Forked live servers hang in sync_to_async after consumer tests (see
# ENVIRONMENT.md); spawned processes start clean.
multiprocessing.set_start_method("spawn", force=True)

pytest_plugins = ["django_rivet.testing"]


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """Close connections of worker threads before the test DB is dropped."""
    yield
    from django_rivet.testing import close_db_connections

    close_db_connections()


@pytest.fixture(autouse=True)
def _background_sessions_closed(request):
    """Close the database sessions of background threads before the flush.

    Invocation threads and the event-log readers of WebSocket connections
    may still be finishing work the test started. The flush at the end of a
    transactional test takes every table lock at once (TRUNCATE); a thread
    that holds some of them and waits for others deadlocks it on PostgreSQL,
    and a session left open makes the database impossible to drop. This
    fixture is torn down before pytest-django's flush (autouse fixtures of a
    conftest are set up after the plugin's): it waits for the threads' jobs
    and closes their connections, while the database is still unblocked.
    """
    yield
    if request.node.get_closest_marker("django_db") is not None:
        from django_rivet.models import db

        db.close_worker_connections()


@pytest.fixture(autouse=True)
def _fresh_actor_cache():
    """Each test starts with no actor loaded in this process."""
    from django_rivet.testing import reset_actor_cache

    reset_actor_cache()
    yield
    reset_actor_cache()


def pytest_addoption(parser):
    parser.addoption(
        "--db-only",
        action="store_true",
        help="Run only the tests that use the database (every one of them; "
        "make test's PostgreSQL leg runs `-m pg`, those whose behaviour "
        "depends on the database).",
    )


def _postgresql_only(item):
    return any(
        "postgresql" in str(mark.args[0] if mark.args else "")
        for mark in item.iter_markers("skipif")
    )


def pytest_collection_modifyitems(config, items):
    # A test that runs only on PostgreSQL but is not marked `pg` would run in
    # no leg of make test at all.
    unmarked = [
        item.nodeid
        for item in items
        if _postgresql_only(item) and item.get_closest_marker("pg") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            "PostgreSQL-only tests must be marked pg (the PostgreSQL leg runs "
            "`-m pg`): " + ", ".join(unmarked)
        )
    if not config.getoption("--db-only"):
        return
    db_fixtures = {"db", "transactional_db", "django_db_setup", "live_server"}
    keep, drop = [], []
    for item in items:
        uses_db = item.get_closest_marker("django_db") is not None or bool(
            db_fixtures & set(getattr(item, "fixturenames", ()))
        )
        (keep if uses_db else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


class RecordingDispatch:
    """A Celery-like dispatch backend that records what it is asked to run."""

    eta_tasks = True

    def __init__(self):
        self.sent = []

    def wake(self, job, args, eta=None):
        self.sent.append((job, args, eta))
        return True


@pytest.fixture
def recording_dispatch():
    """Record dispatched jobs instead of sending Celery tasks."""
    from django_rivet import dispatch

    backend = RecordingDispatch()
    dispatch.use(backend)
    yield backend
    dispatch.use(None)


@pytest.fixture(autouse=True)
def _dispatch_follows_the_settings():
    """Each test starts with the dispatch backend its settings choose.

    ``rivet_worker`` forces the worker backend for the rest of its process
    (``dispatch.use("worker")``); called in a test, that would make every
    later test in the session send no Celery task at all.
    """
    from django_rivet import dispatch

    dispatch.use(None)
    yield
    dispatch.use(None)


# -- real servers ---------------------------------------------------------------------
@pytest.fixture(scope="session")
def redis_url():
    """A real redis-server on loopback for the whole session."""
    from tests.support.servers import redis_server

    with redis_server() as url:
        yield url


@pytest.fixture
def broker(redis_url):
    """A clean Redis as this process's and the servers' Celery broker."""
    import redis

    from tests.support.servers import celery_broker

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    with celery_broker(redis_url):
        yield client
    client.close()


@pytest.fixture(scope="module")
def server_kind():
    """The ASGI server ``server_process`` runs: daphne, unless a module says."""
    return "daphne"


@pytest.fixture(scope="module")
def server_env_extra():
    """What ``server_process`` adds to ``server_env()``: a module may override it."""
    return {}


@pytest.fixture(scope="module")
def server_process(django_db_setup, django_db_blocker, server_kind, server_env_extra):
    """One server process for the module, serving tests.support.asgi on the
    test database: ``(url, process)``. Started once per module (it costs
    about a second); its kind and environment come from the fixtures above.
    """
    from tests.support.servers import asgi_process, server_env

    with django_db_blocker.unblock():
        env = server_env(**server_env_extra)
    with asgi_process(server_kind, env) as running:
        yield running


@pytest.fixture(scope="module")
def server(server_process):
    """The URL of the module's server (``server_process``)."""
    return server_process[0]


# -- scheduling -----------------------------------------------------------------------
# Celery tasks sent after commit (schedule wake-ups) go to the test app's
# broker -- memory:// here -- instead of Celery's default AMQP app, which
# would try to connect to localhost:5672.
import tests.support.celery_app  # noqa: E402, F401


# -- hostile input (tests/transport/test_hostile.py and test_e2e_hostile.py) --------
def pytest_terminal_summary(terminalreporter):
    import sys

    if "tests.support.hostile" not in sys.modules:  # no hostile test was collected
        return
    from tests.support.hostile import TOTALS

    if TOTALS.cases:
        codes = ", ".join(f"{code} {n}" for code, n in sorted(TOTALS.codes.items()))
        terminalreporter.write_line(
            f"hostile input: {TOTALS.cases} cases, {len(TOTALS.codes)} distinct "
            f"error codes ({codes})"
        )
