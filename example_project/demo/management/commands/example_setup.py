"""Prepare the example project for ``make run``.

Migrates the database (in this process: one Django start-up fewer on
every ``make run``), creates the actors whose schedules run without a
visitor (the clock and the digest of ``acme``) and gives the ``demo``
superuser a fresh random password, printed as ``<username> <password>`` for
the start-up banner.
"""

import secrets

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django_rivet import actors

DEMO_USER = "demo"


class Command(BaseCommand):
    help = "Migrate, create the example's scheduled actors, reset the demo login."

    def handle(self, *args, **options):
        call_command("migrate", interactive=False, verbosity=0)
        actors.get_or_create("clock")
        actors.get_or_create("digest", ["acme"])
        # A new password at every start: the login is only ever on this console.
        password = secrets.token_urlsafe(9)
        user, _ = get_user_model().objects.get_or_create(
            username=DEMO_USER, defaults={"is_staff": True, "is_superuser": True}
        )
        user.set_password(password)
        user.save()
        self.stdout.write(f"{DEMO_USER} {password}")
