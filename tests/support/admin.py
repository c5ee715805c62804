"""Driving the admin inspector in tests: staff logins and change-list actions."""

from django.contrib.auth.models import Permission, User
from django.urls import reverse


def log_in_staff(client, *codenames, username="staff"):
    """Log ``client`` in as staff with these django-rivet permissions.

    Every ``view_`` permission of django-rivet's models when none is named.
    """
    permissions = Permission.objects.filter(content_type__app_label="django_rivet")
    if codenames:
        permissions = permissions.filter(codename__in=codenames)
    else:
        permissions = permissions.filter(codename__startswith="view_")
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(*permissions)
    client.force_login(user)
    return client


def act(client, model, action, ids, **extra):
    """Run the admin action ``action`` on the rows ``ids`` of ``model``'s list."""
    return client.post(
        reverse(f"admin:django_rivet_{model}_changelist"),
        {"action": action, "_selected_action": [str(i) for i in ids], **extra},
        follow=True,
    )
