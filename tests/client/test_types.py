"""The remote Python client with the Actor class: typed arguments and results.

HTTP through httpx's WSGI transport (the views, runtime and database are
real); the WebSocket through a real daphne.
"""

from __future__ import annotations

from decimal import Decimal

import httpx
import pytest
from django.core.wsgi import get_wsgi_application

from django_rivet import InvalidArgs
from django_rivet.client import Client
from tests.testapp.shop import Basket, Color, Line, Order, TypedShop

ORDER = {
    "id": "c-1",
    "lines": [{"sku": "fig", "price": "0.35", "qty": 4}],
    "totals": {"total": "1.40", "color": "red"},
    "kind": "retail",
}


@pytest.fixture
def http_client(request):
    http = httpx.Client(transport=httpx.WSGITransport(app=get_wsgi_application()))
    with Client("http://testserver/rivet", http=http, encoding=request.param) as c:
        yield c


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("http_client", ["json", "cbor"], indirect=True)
def test_the_client_given_the_class_sends_and_returns_the_declared_types(
    http_client,
):
    shop = http_client.actor(TypedShop, "remote")
    order = Order.model_validate(ORDER)
    echoed = shop.call("echo", order)
    assert isinstance(echoed, Order) and echoed == order
    assert shop.call("add", Line("fig", Decimal("0.35"), 4)) == Decimal("1.40")
    assert shop.call("basket") == Basket(
        [Line("fig", Decimal("0.35"), 4)], Decimal("1.40")
    )
    with pytest.raises(InvalidArgs) as bad:
        shop.call("echo", {**ORDER, "kind": "gift"})
    assert bad.value.metadata["path"] == "args[0].kind"
    # By name, values go and come as the wire carries them.
    assert http_client.actor("typedShop", "remote").call("total") == "1.40"


@pytest.mark.servers
@pytest.mark.django_db(transaction=True)
async def test_the_client_converts_over_the_websocket_too(server):
    async with Client(f"{server}/rivet") as client:
        conn = await client.actor(TypedShop, "remote-ws").connect()
        try:
            echoed = await conn.call("echo", Order.model_validate(ORDER))
            assert echoed.totals == {"total": Decimal("1.40"), "color": Color.RED}
            total = await conn.call("add", Line("kiwi", Decimal("0.45"), 2))
            assert total == Decimal("0.90")
        finally:
            await conn.close()
