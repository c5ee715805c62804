import pytest
from django_rivet import actors
from django_rivet.testing import freeze_time, run_due

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_cron_job_posts_a_summary_of_the_minute_into_general():
    with freeze_time() as clock:
        digest = actors.get_or_create("digest", ["acme"])
        general = actors.get_or_create("chatRoom", ["acme", "general"])
        general.call("post", "ann", "hi")
        general.call("post", "bob", "hello")
        general.call("post", "ann", "how are you?")
        clock.advance(60)
        assert run_due() == 1

    last = general.call("recent")[-1]
    assert (last["nickname"], last["text"]) == (
        "digest",
        "Since the last digest: 3 messages from 2 people, 0 orders placed.",
    )
    (run,) = digest.call("status")["history"]
    assert run["result"] == "ok"


def test_a_quiet_minute_posts_nothing():
    with freeze_time() as clock:
        actors.get_or_create("digest", ["acme"])
        clock.advance(60)
        assert run_due() == 1
    assert actors.get_or_create("chatRoom", ["acme", "general"]).call("recent") == []
