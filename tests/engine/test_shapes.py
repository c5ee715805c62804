"""Typed workflow values on the pure engine: input, output, step results."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from decimal import Decimal

import pytest

from django_rivet.engine import StepOutputError, read_history, run_workflow

from .helpers import execute


class Kind(enum.Enum):
    CARD = "card"
    CASH = "cash"


@dataclass
class Payment:
    amount: Decimal
    kind: Kind


@dataclass
class Receipt:
    paid: Decimal
    kind: Kind
    note: str = ""


# The step functions each run saw, in order: a replay does not run them.
RAN: list[str] = []


async def pay(ctx, input: Payment) -> Receipt:
    assert isinstance(input, Payment), input

    async def charge() -> Receipt:
        RAN.append("charge")
        return Receipt(input.amount, input.kind)

    def fee() -> Decimal:
        RAN.append("fee")
        return input.amount / 100

    receipt = await ctx.step("charge", charge)
    assert isinstance(receipt, Receipt), receipt
    cut = await ctx.step("fee", fee)
    assert isinstance(cut, Decimal), cut
    body = await ctx.messages.next("wait", names=["go"])
    return Receipt(receipt.paid - cut, receipt.kind, body.body)


@pytest.fixture(autouse=True)
def _fresh_runs():
    RAN.clear()


async def test_a_step_returning_a_dataclass_replays_as_that_dataclass(clock, driver):
    payment = Payment(Decimal("12.50"), Kind.CARD)
    first = await run_workflow("pay-1", pay, payment, driver, "yield")
    assert first.state == "sleeping" and first.waiting_for == ["go"]
    await driver.add_message("go", "thanks")
    outcome = await run_workflow("pay-1", pay, payment, driver, "yield")
    assert RAN == ["charge", "fee"]  # the second run replayed both steps
    assert outcome.state == "completed"
    # What is recorded is a value of the domain: the output too.
    assert outcome.output == {"paid": "12.375", "kind": "card", "note": "thanks"}
    history = {e.location: e for e in await read_history(driver)}
    assert history["charge"].output == {"paid": "12.50", "kind": "card", "note": ""}
    assert history["fee"].output == "0.125"


async def test_an_input_of_the_annotated_type_given_as_a_map_is_converted(
    clock, driver, mode
):
    async def later(ctx, input: Payment) -> Decimal:
        assert isinstance(input, Payment)
        return input.amount / 100

    outcome = await execute(
        clock, "pay-2", later, driver, mode, {"amount": 3, "kind": "cash"}
    )
    assert outcome.output == "0.03"


async def test_an_input_that_does_not_fit_fails_the_workflow_naming_the_path(
    clock, driver
):
    outcome = await run_workflow(
        "pay-3", pay, {"amount": "?", "kind": "card"}, driver, "yield"
    )
    assert outcome.state == "failed"
    assert isinstance(outcome.error, StepOutputError)
    assert "input.amount" in str(outcome.error)


async def test_a_step_result_that_cannot_be_converted_fails_without_retries(
    clock, driver
):
    async def wf(ctx, _):
        def wrong() -> Receipt:
            RAN.append("wrong")
            return object()  # type: ignore[return-value]

        return await ctx.step("wrong", wrong, max_retries=3)

    outcome = await run_workflow("bad-step", wf, None, driver, "yield")
    assert outcome.state == "failed"
    assert RAN == ["wrong"]


async def test_unannotated_steps_record_and_replay_values_as_they_are(clock, driver):
    async def wf(ctx, _):
        return await ctx.step("plain", lambda: {"a": [1, 2]})

    outcome = await run_workflow("plain", wf, None, driver, "yield")
    assert outcome.output == {"a": [1, 2]}
