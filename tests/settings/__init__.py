"""Settings of the test suite.

SQLite by default (a file, so other processes can share it); set
``RIVET_TEST_DATABASE_URL=postgres://user@127.0.0.1:port/name`` to run on
PostgreSQL (``make test`` does, with a throwaway cluster), and
``RIVET_TEST_REDIS_URL`` for tests that need Redis.
"""

import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "tests-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_rivet",
    "tests.testapp",
]
# Django's Tasks framework: built in from Django 6.0, the django-tasks
# backport (an app) on Django 5.2.
if importlib.util.find_spec("django.tasks") is None:
    INSTALLED_APPS.append("django_tasks")
TASKS = {
    "default": {
        "BACKEND": "django_rivet.task_backend.RivetTaskBackend",
        "QUEUES": ["default", "emails", "limited"],
        "OPTIONS": {"max_retries": 0},
    }
}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.support.urls"
ASGI_APPLICATION = "tests.support.asgi.application"
STATIC_URL = "/static/"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]


def database_from_url(url: str) -> dict[str, Any]:
    """Return a DATABASES entry for a postgres:// URL."""
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/") or "postgres",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "127.0.0.1",
        "PORT": str(parts.port or 5432),
        "TEST": {"NAME": "test_rivet"},
    }


_test_db_dir = os.environ.get("RIVET_TEST_DB_DIR") or tempfile.gettempdir()
if os.environ.get("RIVET_TEST_DATABASE_URL"):
    DATABASES = {"default": database_from_url(os.environ["RIVET_TEST_DATABASE_URL"])}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.path.join(_test_db_dir, "rivet-tests.sqlite3"),
            "OPTIONS": {
                "timeout": 30,
                # NORMAL: a commit is not fsynced (WAL still survives any
                # process being killed, which is what the crash tests do;
                # only a power cut could lose it). The PostgreSQL leg's
                # cluster runs without fsync likewise (scripts/pg.sh).
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            # A file, not :memory:, so spawned processes share the test DB.
            "TEST": {
                "NAME": os.path.join(_test_db_dir, f"rivet-test-{os.getpid()}.sqlite3")
            },
        }
    }

# Servers started by the tests (daphne, Celery workers) run in subprocesses
# against the test database the pytest process created.
if os.environ.get("RIVET_SERVER_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["RIVET_SERVER_DB_NAME"]

REDIS_URL = os.environ.get("RIVET_TEST_REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
    CELERY_BROKER_URL = REDIS_URL
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"
CELERY_TASK_IGNORE_RESULT = True

RIVET: dict[str, Any] = {}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_rivet": {"handlers": ["console"], "level": "WARNING"}},
}

# The suite creates many users; the default hasher's 1,000,000 rounds of
# PBKDF2 would cost most of a second each (Django's advice for tests).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
