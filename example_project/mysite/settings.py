"""Settings of the example project.

SQLite and in-process everything by default (``make run``). Environment:
``DATABASE_URL=postgres://user:pass@host:port/name`` switches to PostgreSQL;
``REDIS_URL=redis://host:port/0`` switches the channel layer and the Celery
broker to Redis (``make run-celery``); ``SQLITE_PATH`` moves the SQLite
file; ``DJANGO_ALLOWED_HOSTS=a,b`` replaces the loopback names (for
``make run HOST=0.0.0.0``).
"""

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = os.environ.get(
    "DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]"
).split(",")
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
    "chat",
    "orders",
    "digest",
    "demo",
    "story",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "mysite.urls"
ASGI_APPLICATION = "mysite.asgi.application"
STATIC_URL = "/static/"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "mysite" / "templates"],
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

DATABASE_URL = os.environ.get("DATABASE_URL", "")
if DATABASE_URL.startswith(("postgres://", "postgresql://")):
    _db = urlsplit(DATABASE_URL)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _db.path.lstrip("/") or "postgres",
            "USER": unquote(_db.username or ""),
            "PASSWORD": unquote(_db.password or ""),
            "HOST": _db.hostname or "127.0.0.1",
            "PORT": str(_db.port or 5432),
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("SQLITE_PATH", str(BASE_DIR / "db.sqlite3")),
            # WAL lets readers run while an actor invocation holds the write
            # lock; the timeout covers invocations queued behind it.
            "OPTIONS": {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL;"},
        }
    }

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # As docs/production.md says: a read timeout above channels_redis'
            # 5 s blocking read, and a per-process capacity for the sockets.
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": 10}],
                "capacity": 1000,
            },
        }
    }
    CELERY_BROKER_URL = REDIS_URL
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"

CELERY_TASK_IGNORE_RESULT = True

# The order workflow "e-mails" its confirmations to the console.
EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"

RIVET = {
    # Without a Celery worker (make run), the web process fires schedules and
    # runs workflows itself.
    "EMBEDDED_WORKER": os.environ.get(
        "RIVET_EMBEDDED_WORKER", "0" if REDIS_URL else "1"
    )
    == "1",
    "EXPOSE_ERRORS": DEBUG,
    # Pages on other origins that use the official RivetKit client, e.g.
    # RIVET_CORS_ALLOWED_ORIGINS="http://localhost:5173" for a Vite dev server
    # (docs/rivetkit-client.md). Empty: no CORS.
    "CORS_ALLOWED_ORIGINS": os.environ.get("RIVET_CORS_ALLOWED_ORIGINS", "").split(),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django_rivet": {"handlers": ["console"], "level": "INFO", "propagate": False}
    },
}
