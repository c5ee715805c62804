"""Typed workflow input, output and step results through the Django runtime."""

from __future__ import annotations

from decimal import Decimal

import pytest

from django_rivet import InvalidArgs, workflows
from django_rivet.models import Workflow
from django_rivet.testing import run_until_idle
from tests.testapp.shop import Color, Order, Receipt

pytestmark = pytest.mark.django_db(transaction=True)

ORDER = {
    "id": "o-9",
    "lines": [{"sku": "apple", "price": "0.990", "qty": 3}],
    "totals": {"total": "2.970", "color": "blue"},
    "kind": "wholesale",
}


def test_a_typed_workflow_takes_its_input_type_and_results_in_its_output_type():
    handle = workflows.start("typedCheckout", Order.model_validate(ORDER), id="t-1")
    assert run_until_idle(handle) == "sleeping"  # waits for "confirm"
    assert handle.snapshot().input == ORDER  # stored as the wire carries it
    handle.send("confirm")
    # The second run replays the "charge" step: the workflow asserts it is
    # a Receipt again, as on the first run.
    assert run_until_idle(handle) == "completed"
    receipt = handle.result()
    assert receipt == Receipt("o-9", Decimal("2.970"), Color.BLUE)
    assert handle.snapshot().output == {
        "order_id": "o-9",
        "amount": "2.970",
        "color": "blue",
    }
    steps = {entry.location: entry for entry in handle.history()}
    assert steps["charge"].output == handle.snapshot().output


def test_an_input_that_does_not_fit_is_refused_at_start_and_nothing_is_stored():
    bad = {**ORDER, "kind": "gift"}
    with pytest.raises(InvalidArgs) as refused:
        workflows.start("typedCheckout", bad, id="t-2")
    assert refused.value.metadata["path"] == "input.kind"
    assert not Workflow.objects.filter(pk="t-2").exists()
