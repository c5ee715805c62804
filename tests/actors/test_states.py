"""Typed, versioned state: ``state_type``, ``state_version``, ``migrate_state``."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_rivet import Actor, StateVersionAhead, UserError, action, actors
from django_rivet.encoding import cbor_dumps, cbor_loads
from django_rivet.exceptions import InvalidValue
from django_rivet.models import Actor as ActorRow
from django_rivet.testing import register_temporarily, reset_actor_cache

# pg: migrations ride in the invocation's transaction (rolled back with it),
# and rivet_migrate_state locks and writes in batches.
pytestmark = [pytest.mark.pg, pytest.mark.django_db]


@dataclass
class Item:
    sku: str
    price: Decimal


@dataclass
class Cart:
    items: list[Item] = field(default_factory=list)
    total: Decimal = Decimal("0")


class CartV1(Actor):
    """The first deploy: an untyped state {"skus": [...], "prices": [...]}."""

    name = "versionedCart"
    initial_state = {"skus": [], "prices": []}

    @action
    def add(self, ctx, sku: str, price: str):
        ctx.state["skus"].append(sku)
        ctx.state["prices"].append(price)


# Calls of migrate_state, by the version migrated from.
MIGRATIONS: list[int] = []


class CartV2(Actor):
    """The second deploy: a typed state, migrated from the first's."""

    name = "versionedCart"
    state_type = Cart
    state_version = 2

    def migrate_state(self, ctx, state, from_version):
        MIGRATIONS.append(from_version)
        if state.get("skus") == ["poison"]:
            raise RuntimeError("cannot migrate this one")
        items = [
            {"sku": s, "price": p}
            for s, p in zip(state["skus"], state["prices"], strict=True)
        ]
        total = sum((Decimal(p) for p in state["prices"]), Decimal("0"))
        return {"items": items, "total": str(total)}

    @action
    def add(self, ctx, item: Item) -> Decimal:
        ctx.state.items.append(item)
        ctx.state.total += item.price
        return ctx.state.total

    @action
    def cart(self, ctx) -> Cart:
        return ctx.state

    @action
    def fail(self, ctx):
        raise UserError("refused")

    @action
    def replace(self, ctx):
        ctx.state = {"items": [], "total": "7"}


class CartV2Same(Actor):
    """Version 2 whose migration keeps the stored bytes as they were."""

    name = "versionedCart"
    state_version = 2

    def migrate_state(self, ctx, state, from_version):
        MIGRATIONS.append(from_version)
        return state

    @action
    def skus(self, ctx):
        return ctx.state["skus"]


@pytest.fixture(autouse=True)
def _clear_migrations():
    MIGRATIONS.clear()


def stored(handle):
    row = ActorRow.objects.get(pk=handle.actor_id)
    return row.state_version, cbor_loads(bytes(row.state))


def old_cart(key, pairs=(("a", "1.50"), ("b", "2.25"))):
    with register_temporarily(CartV1):
        handle = actors.get_or_create("versionedCart", key)
        for sku, price in pairs:
            handle.call("add", sku, price)
    reset_actor_cache()  # the next deploy's process has nothing loaded
    return handle


def test_a_typed_state_is_an_instance_whose_mutations_persist_without_a_save():
    with register_temporarily(CartV2):
        handle = actors.get_or_create("versionedCart", "new")
        assert handle.call("add", Item("a", Decimal("1.10"))) == Decimal("1.10")
        reset_actor_cache()
        total = handle.call("add", {"sku": "b", "price": "2.015"})
        assert total == Decimal("3.115")
        cart = handle.call("cart")
    assert cart == Cart(
        [Item("a", Decimal("1.10")), Item("b", Decimal("2.015"))], Decimal("3.115")
    )
    assert stored(handle) == (
        2,
        {
            "items": [
                {"sku": "a", "price": "1.10"},
                {"sku": "b", "price": "2.015"},
            ],
            "total": "3.115",
        },
    )


def test_an_older_state_is_migrated_once_on_first_load_and_written_back():
    handle = old_cart("old")
    assert stored(handle)[0] == 1
    with register_temporarily(CartV2):
        assert handle.call("add", Item("c", Decimal("1"))) == Decimal("4.75")
        reset_actor_cache()  # a second load, from the row
        cart = handle.call("cart")
    assert MIGRATIONS == [1]
    assert cart.items[0] == Item("a", Decimal("1.50"))
    assert [i.sku for i in cart.items] == ["a", "b", "c"]
    version, state = stored(handle)
    assert version == 2 and state["total"] == "4.75"


def test_a_migration_rolls_back_with_a_failing_invocation():
    handle = old_cart("rolled")
    before = stored(handle)
    with register_temporarily(CartV2):
        with pytest.raises(UserError):
            handle.call("fail")
        assert stored(handle) == before  # still version 1, old shape
        reset_actor_cache()
        assert handle.call("cart").total == Decimal("3.75")
    assert MIGRATIONS == [1, 1]  # migrated again: the first was rolled back
    assert stored(handle)[0] == 2


def test_a_migration_that_keeps_the_bytes_still_records_the_new_version():
    handle = old_cart("same")
    with register_temporarily(CartV2Same):
        assert handle.call("skus") == ["a", "b"]
        reset_actor_cache()
        handle.call("skus")
    assert MIGRATIONS == [1]
    assert stored(handle)[0] == 2


def test_a_state_written_by_a_newer_version_is_refused_and_nothing_is_written():
    handle = old_cart("ahead")
    ActorRow.objects.filter(pk=handle.actor_id).update(state_version=3)
    row = ActorRow.objects.get(pk=handle.actor_id)
    with register_temporarily(CartV2):
        with pytest.raises(StateVersionAhead) as refused:
            handle.call("cart")
    assert refused.value.qualified_code == "actor/state_version_ahead"
    assert refused.value.metadata == {"state_version": 3, "code_version": 2}
    after = ActorRow.objects.get(pk=handle.actor_id)
    assert (after.version, bytes(after.state)) == (row.version, bytes(row.state))
    assert MIGRATIONS == []


def test_assigning_a_map_to_a_typed_state_converts_it_or_names_the_path():
    with register_temporarily(CartV2):
        handle = actors.get_or_create("versionedCart", "assigned")
        handle.call("replace")
        reset_actor_cache()
        assert handle.call("cart") == Cart([], Decimal("7"))
    ActorRow.objects.filter(pk=handle.actor_id).update(
        state=cbor_dumps({"items": [{"sku": "x"}], "total": "1"})
    )
    reset_actor_cache()
    with register_temporarily(CartV2), pytest.raises(InvalidValue) as bad:
        handle.call("cart")
    assert bad.value.metadata["path"] == "state.items[0].price"
    assert "raise state_version" in bad.value.message


# -- rivet_migrate_state ------------------------------------------------------------
def bulk_old_carts(count, poison=()):
    """Store ``count`` version-1 carts directly (what the first deploy left)."""
    rows = []
    for index in range(count):
        key = f"bulk-{index:05d}"
        skus = ["poison"] if index in poison else [f"s{index}"]
        state = {"skus": skus, "prices": [f"{index}.25"]}
        rows.append(
            ActorRow(
                id=uuid.uuid4(),
                name="versionedCart",
                key=f'["{key}"]',
                key_parts=[key],
                state=cbor_dumps(state),
                state_version=1,
            )
        )
    ActorRow.objects.bulk_create(rows, batch_size=2000)


def run_command(*args):
    out, err = StringIO(), StringIO()
    call_command("rivet_migrate_state", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_rivet_migrate_state_migrates_10000_actors_in_batches():
    bulk_old_carts(10_000)
    with register_temporarily(CartV2):
        out, _ = run_command("versionedCart", "--batch", "1000")
    assert "Migrated 10000 'versionedCart' actor(s) to state_version 2" in out
    assert "in 10 batch(es)" in out
    assert len(MIGRATIONS) == 10_000
    assert not ActorRow.objects.filter(name="versionedCart", state_version=1).exists()
    row = ActorRow.objects.get(name="versionedCart", key='["bulk-00042"]')
    assert cbor_loads(bytes(row.state)) == {
        "items": [{"sku": "s42", "price": "42.25"}],
        "total": "42.25",
    }
    with register_temporarily(CartV2):
        out, _ = run_command("versionedCart")  # nothing left to do
    assert "Migrated 0 'versionedCart' actor(s)" in out


def test_rivet_migrate_state_lists_the_actors_it_could_not_migrate():
    bulk_old_carts(5, poison={3})
    ActorRow.objects.filter(key='["bulk-00004"]').update(state_version=7)
    with register_temporarily(CartV2), pytest.raises(CommandError) as failed:
        call_command("rivet_migrate_state", "versionedCart", "--batch", "2",
                     stdout=StringIO(), stderr=StringIO())  # fmt: skip
    assert "1 actor(s) could not be migrated" in str(failed.value)
    versions = dict(ActorRow.objects.values_list("key", "state_version"))
    assert versions == {
        '["bulk-00000"]': 2,
        '["bulk-00001"]': 2,
        '["bulk-00002"]': 2,
        '["bulk-00003"]': 1,  # its migration raised: left as it was
        '["bulk-00004"]': 7,  # ahead: left alone
    }


def test_a_dry_run_runs_every_migration_and_keeps_none():
    bulk_old_carts(30)
    with register_temporarily(CartV2):
        out, _ = run_command("versionedCart", "--dry-run", "--batch", "8")
    assert "Would migrate 30 'versionedCart' actor(s)" in out
    assert "in 4 batch(es)" in out
    assert len(MIGRATIONS) == 30
    assert ActorRow.objects.filter(state_version=1).count() == 30


def test_rivet_migrate_state_refuses_an_unknown_actor():
    with pytest.raises(CommandError, match="No actor class is registered"):
        run_command("noSuchActor")
