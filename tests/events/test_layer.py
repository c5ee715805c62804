"""Publishing to the channel layer: after commit, one message per invocation, loud once.

The in-memory channel layer of the test settings, and Redis layers that do
not answer or cannot be built.
"""

import asyncio

import pytest
from django.test import override_settings

from django_rivet import UserError, actors, events

pytestmark = pytest.mark.django_db(transaction=True)


# -- broadcasts ----
@pytest.mark.pg
async def test_broadcasts_are_logged_and_delivered_only_after_commit():
    from channels.layers import get_channel_layer

    from django_rivet.encoding import cbor_loads
    from django_rivet.events import actor_group

    layer = get_channel_layer()
    counter = await actors.aget_or_create("counter", "events")
    channel = await layer.new_channel()
    await layer.group_add(actor_group(counter.actor_id), channel)
    await counter.acall("increment", 5)
    message = await asyncio.wait_for(layer.receive(channel), 5)
    # One message per invocation, carrying its events.
    assert (message["type"], message["actor"], message["last"]) == (
        "rivet.events",
        counter.actor_id.hex,
        1,
    )
    [(seq, name, args)] = message["events"]
    assert (seq, name, cbor_loads(args)) == (1, "changed", [5])
    with pytest.raises(UserError):
        await counter.acall("add_note_then_fail", "x")
    await counter.acall("increment")
    message = await asyncio.wait_for(layer.receive(channel), 5)
    [(seq, name, args)] = message["events"]
    assert (seq, cbor_loads(args)) == (2, [6])


# -- a failing channel layer is loud, once --------------------------------------------
def layer_errors(caplog):
    return [
        record
        for record in caplog.records
        if record.name == "django_rivet.events" and record.levelname == "ERROR"
    ]


def test_publishing_to_a_failing_layer_logs_one_error_and_the_recovery(caplog):
    from tests.support.servers import free_port

    down = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{free_port()}/0"]},
        }
    }
    counter = actors.get_or_create("counter", "loud")
    events.layer_health.ok()  # no outage left over from an earlier test
    with caplog.at_level("DEBUG", logger="django_rivet.events"):
        with override_settings(CHANNEL_LAYERS=down):
            for _ in range(3):
                counter.call("increment")  # the calls succeed
        assert len(layer_errors(caplog)) == 1
        assert "channel layer failed op=publish" in layer_errors(caplog)[0].message
        counter.call("increment")  # the in-memory layer again
    assert counter.call("getCount") == 4
    recovered = [r for r in caplog.records if "works again" in r.getMessage()]
    assert len(recovered) == 1 and "failures=3" in recovered[0].getMessage()


def test_a_misconfigured_layer_logs_an_error_not_a_debug_line(caplog):
    broken = {"default": {"BACKEND": "no.such.ChannelLayer"}}
    counter = actors.get_or_create("counter", "misconfigured")
    events.layer_health.ok()
    with caplog.at_level("DEBUG", logger="django_rivet.events"):
        with override_settings(CHANNEL_LAYERS=broken):
            counter.call("increment")
            counter.call("increment")
    counter.call("increment")  # a working layer ends the "outage"
    errors = layer_errors(caplog)
    assert len(errors) == 1
    assert "op=configure" in errors[0].message
