"""Typed actors and workflows of the test app (docs/types.md).

Imported by the app's ``actors.py`` and ``workflows.py``, so they are
registered; the module is about what annotations convert: a pydantic model
holding dataclasses and a ``TypedDict`` with a ``Decimal`` and an ``Enum``.
"""

import enum
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from django_rivet import Actor, action, queue_handler
from django_rivet.workflows import workflow


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Line:
    sku: str
    price: Decimal
    qty: Annotated[int, Field(gt=0)] = 1


class Totals(TypedDict):
    total: Decimal
    color: Color


class Order(BaseModel):
    id: str
    lines: list[Line]
    totals: Totals
    kind: Literal["retail", "wholesale"]


@dataclass
class Basket:
    lines: list[Line] = field(default_factory=list)
    total: Decimal = Decimal("0")
    budget: Decimal | None = None


class Opening(TypedDict):
    budget: Decimal


class ConnInfo(TypedDict):
    name: str


class TypedShop(Actor):
    """Every kind of typed value, in and out."""

    name = "typedShop"

    state_type = Basket
    events = {"added": Line}

    def create_state(self, ctx, input: Opening | None) -> Basket:
        return Basket(budget=None if input is None else input["budget"])

    def on_before_connect(self, ctx, params: ConnInfo | None):
        return None

    @action
    def echo(self, ctx, order: Order) -> Order:
        return order

    @action
    def echo_line(self, ctx, line: Line) -> Line:
        return line

    @action
    def echo_totals(self, ctx, totals: Totals) -> Totals:
        return totals

    @action
    def add(self, ctx, line: Line, note: str = "") -> Decimal:
        ctx.state.lines.append(line)
        ctx.state.total += line.price * line.qty
        ctx.broadcast("added", line)
        return ctx.state.total

    @action
    def basket(self, ctx) -> Basket:
        return ctx.state

    @action
    def total(self, ctx) -> Decimal:
        return ctx.state.total

    @action
    def delivery(self, ctx, when: date, color: Color) -> str:
        return f"{when.isoformat()} {color.value}"

    @action
    def wrong_result(self, ctx) -> Line:
        return {"sku": "x"}  # no price: does not fit the annotation

    @queue_handler("orders")
    def on_order(self, ctx, order: Order) -> Totals:
        for line in order.lines:
            ctx.state.lines.append(line)
            ctx.state.total += line.price * line.qty
        return {"total": ctx.state.total, "color": order.totals["color"]}


@dataclass
class Receipt:
    order_id: str
    amount: Decimal
    color: Color


@workflow(name="typedCheckout")
async def typed_checkout(ctx, input: Order) -> Receipt:
    async def charge() -> Receipt:
        amount = sum((line.price * line.qty for line in input.lines), Decimal("0"))
        return Receipt(input.id, amount, input.totals["color"])

    receipt = await ctx.step("charge", charge)
    assert isinstance(receipt, Receipt), receipt
    await ctx.messages.next("confirm", names=["confirm"])
    again = await ctx.step("charge-again", charge)
    assert isinstance(again, Receipt), again
    return receipt
