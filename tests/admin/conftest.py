import pytest
from django.contrib.auth.models import User

from tests.support.admin import log_in_staff


@pytest.fixture
def viewer(client):
    """A client logged in as staff allowed to view every django-rivet model."""
    return log_in_staff(client, username="viewer")


@pytest.fixture
def root(client):
    """A client logged in as a superuser."""
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client
