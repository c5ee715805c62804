"""ctx.after_commit: once after the invocation's commit, never after a rollback."""

import asyncio
import logging

import pytest
from django.db import connection

from django_rivet import Actor, UserError, action, actors
from django_rivet.models import Actor as ActorRow
from django_rivet.testing import register_temporarily

pytestmark = pytest.mark.django_db(transaction=True)

RAN: list = []


def committed_score(actor_id):
    """What another reader sees: the committed row (a query of its own)."""
    return ActorRow.objects.get(pk=actor_id).decoded_state()["score"]


class Mailer(Actor):
    name = "mailer"
    initial_state = {"score": 0}

    @action
    def confirm(self, ctx, then_fail: bool = False):
        ctx.state["score"] += 1
        ctx.after_commit(self.sent, ctx.actor_id, ctx.state["score"])
        if then_fail:
            raise UserError("rolled back", code="nope")
        return ctx.state["score"]

    @staticmethod
    def sent(actor_id, score):
        # The change is durable when this runs: a fresh read sees it.
        RAN.append(("sent", score, committed_score(actor_id)))

    @action
    async def confirm_async(self, ctx):
        ctx.state["score"] += 1

        async def notify():
            await asyncio.sleep(0)
            RAN.append(("async", ctx.state["score"]))

        ctx.after_commit(notify)
        return ctx.state["score"]

    @action
    def confirm_broken(self, ctx):
        ctx.state["score"] += 1
        ctx.after_commit(self.explode)
        return "answered"

    @staticmethod
    def explode():
        raise RuntimeError("the mail server is down")


@pytest.fixture
def mailer():
    RAN.clear()
    with register_temporarily(Mailer):
        yield actors.get_or_create("mailer", "m")


def test_it_runs_once_after_the_commit(mailer):
    assert mailer.call("confirm") == 1
    assert RAN == [("sent", 1, 1)]


def test_it_never_runs_after_a_rollback(mailer):
    with pytest.raises(UserError):
        mailer.call("confirm", True)
    assert RAN == []
    assert committed_score(mailer.actor_id) == 0


def test_an_exception_in_it_is_logged_and_the_answer_stands(mailer, caplog):
    with caplog.at_level(logging.ERROR, logger="django_rivet.actors"):
        assert mailer.call("confirm_broken") == "answered"
    assert committed_score(mailer.actor_id) == 1
    assert "after_commit callback failed" in caplog.text
    assert "the mail server is down" in caplog.text


def test_an_async_action_registers_an_async_callback(mailer):
    assert mailer.call("confirm_async") == 1
    assert RAN == [("async", 1)]


async def test_in_a_lane_round_a_failed_call_drops_its_callback(mailer):
    # Concurrent async calls share one transaction, each in a savepoint: the
    # failing one's callback goes with its savepoint, the others' run.
    outcomes = await asyncio.gather(
        *(mailer.acall("confirm", i == 2) for i in range(5)),
        return_exceptions=True,
    )
    assert isinstance(outcomes[2], UserError)
    assert sorted(score for _, score, _ in RAN) == sorted(
        o for o in outcomes if isinstance(o, int)
    )
    assert len(RAN) == 4


def test_inside_an_outer_transaction_it_waits_for_that_commit(mailer):
    from django.db import transaction

    with transaction.atomic():
        mailer.call("confirm")
        assert RAN == []
        assert connection.in_atomic_block
    assert [entry[:2] for entry in RAN] == [("sent", 1)]
