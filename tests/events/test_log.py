"""The event log: each broadcast logged with its seq, the last EVENT_LOG_SIZE kept."""

import pytest
from django.test import override_settings

from django_rivet import actors
from django_rivet.models import Actor as ActorRow
from django_rivet.models import ActorEvent

# pg: the PostgreSQL leg runs this module (the log is written in the invoking
# transaction, its truncation by raw SQL).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


def test_event_log_is_bounded():
    counter = actors.get_or_create("counter", "log")
    with override_settings(RIVET={"EVENT_LOG_SIZE": 3}):
        for _ in range(5):
            counter.call("increment")
    assert list(ActorEvent.objects.order_by("seq").values_list("seq", flat=True)) == [
        3,
        4,
        5,
    ]
    assert ActorRow.objects.get(pk=counter.actor_id).event_seq == 5
