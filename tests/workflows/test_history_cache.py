"""The history cache (``WORKFLOW_CACHE_SIZE``): a wake without the history's read.

A run that released cleanly leaves its history in this process; the next
wake here uses it only when its claim proves the history unchanged
(``Workflow.history_mark``). Everything runs in-process on the virtual
clock; "another process" is simulated with this one's cache put aside.
"""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest
from asgiref.sync import sync_to_async
from django.core.checks import run_checks
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_rivet import checks as rivet_checks
from django_rivet import workflows
from django_rivet.clock import freeze_time
from django_rivet.engine import keys
from django_rivet.models import Workflow, WorkflowKV, WorkflowStatus, db
from django_rivet.models.base import prefix_end
from django_rivet.testing import run_until_idle
from django_rivet.workflows import history_cache, leases, operations, releases
from django_rivet.workflows.blocking import run_private
from django_rivet.workflows.driver import DjangoDriver
from django_rivet.workflows.history_cache import HistoryCache, HistoryCopy
from tests.engine.faults import SCENARIOS, Scenario, check_every_fault, reference

# pg: the PostgreSQL leg runs this module (the mark's statements, both dialects).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

CACHE = {"WORKFLOW_CACHE_SIZE": 100}


@pytest.fixture
def clock():
    with freeze_time(1_700_000_000.0) as frozen:
        yield frozen


@pytest.fixture
def cache():
    history_cache.cache.clear()
    with override_settings(RIVET=CACHE):
        yield history_cache.cache
    history_cache.cache.clear()


def history_reads(queries):
    """The SELECTs of the KV table among ``queries``."""
    table = WorkflowKV._meta.db_table
    return [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip().upper().startswith("SELECT") and table in q["sql"]
    ]


def shape(workflow_id):
    """The history, messages by name and body (their ids differ per workflow)."""

    def output(value):
        if isinstance(value, list):
            return [(m["name"], m["body"]) for m in value]
        return value

    return [
        (h.kind, h.location, h.status, output(h.output))
        for h in operations.history(workflow_id)
    ]


def wake(handle, body):
    """Send ``body`` as a "ping" and run the listener to its next wait."""
    handle.send("ping", body)
    with CaptureQueriesContext(connection) as queries:
        assert run_until_idle(handle) == "sleeping"
    return history_reads(queries)


def listening(workflow_id):
    handle = workflows.start("listener", id=workflow_id)
    assert run_until_idle(handle) == "sleeping"
    return handle


# -- a wake served from the cache ------------------------------------------------------
def test_a_second_wake_reads_no_history_and_ends_as_without_the_cache(clock, cache):
    handle = listening("cached")
    assert wake(handle, 0)[:1] == []  # the first run left its history
    assert wake(handle, 1) == []
    assert cache.hits == 2 and "cached" in cache
    with override_settings(RIVET={"WORKFLOW_CACHE_SIZE": 0}):
        plain = listening("plain")
        assert wake(plain, 0) and wake(plain, 1)  # today's path reads it
    assert shape("cached") == shape("plain")
    assert len(shape("cached")) == 3  # ping-0, ping-1 received, ping-2 waits


def test_the_cache_is_off_by_default(clock):
    history_cache.cache.clear()
    handle = listening("default")
    assert wake(handle, 0)
    assert len(history_cache.cache) == 0
    assert Workflow.objects.get(pk="default").history_mark  # kept all the same


# -- what makes it reload --------------------------------------------------------------
def test_a_history_another_process_wrote_after_caching_is_reloaded(clock, cache):
    handle = listening("elsewhere")
    assert wake(handle, 0) == []
    # Another process claims, writes with its token and releases.
    lease = leases.claim("elsewhere", run=False)
    assert lease is not None and lease.history_mark.startswith("c:")
    driver = DjangoDriver("elsewhere", lease_token=lease.token, private_loop=True)
    run_private(driver.set(keys.event_key("from-there"), b"\x00"))
    assert leases.release(lease) is not None
    stale = list(WorkflowKV.objects.filter(workflow_id="elsewhere"))
    assert "elsewhere" not in cache  # (this process's release dropped it)
    assert wake(handle, 1)  # read again
    assert cache.hits == 1 and cache.misses >= 1
    assert len(stale) < WorkflowKV.objects.filter(workflow_id="elsewhere").count()


def test_a_wake_run_by_another_process_is_not_served_from_this_ones_copy(clock, cache):
    handle = listening("moved")
    assert wake(handle, 0) == []
    kept = dict(cache._entries)  # this process's copy, as it would stay
    with override_settings(RIVET={"WORKFLOW_CACHE_SIZE": 0}):  # "the other"
        assert wake(handle, 1)
    cache._entries.update(kept)
    assert wake(handle, 2)  # the copy is a wake behind: not used
    with override_settings(RIVET={"WORKFLOW_CACHE_SIZE": 0}):
        plain = listening("plain")
        for body in range(3):
            wake(plain, body)
    assert shape("moved") == shape("plain")


def test_a_run_that_died_without_releasing_leaves_the_cache_unused(clock, cache):
    handle = listening("died")
    assert wake(handle, 0) == []
    handle.send("ping", 1)
    dead = leases.claim("died")  # a worker that claims, then dies
    assert dead is not None and dead.history_mark.startswith("c:")
    clock.advance(leases.lease_seconds() + 1)
    with CaptureQueriesContext(connection) as queries:
        assert run_until_idle(handle) == "sleeping"
    assert history_reads(queries)
    assert (cache.hits, cache.misses) == (1, 2)  # the first run; "stale"
    assert len(shape("died")) == 3
    assert wake(handle, 2) == []  # its successor's release counts again


def test_a_reply_taken_by_its_requester_invalidates_the_cache(clock, cache):
    handle = workflows.start("asker", id="asked")
    assert handle.request("approve", {"by": "me"}, timeout=5) == {
        "ok": True,
        "by": "me",
    }
    # The reply was deleted without the lease: the mark says so.
    assert Workflow.objects.get(pk="asked").history_mark == ""
    with CaptureQueriesContext(connection) as queries:
        assert run_until_idle(handle) == "sleeping"  # ctx.sleep("after", 60)
    assert history_reads(queries)
    assert cache.hits == 0
    clock.advance(61)
    assert run_until_idle(handle) == "completed"
    assert cache.hits == 1  # that run's release counts again


def test_invalidate_resets_the_mark_of_a_history_written_without_the_lease(cache):
    Workflow.objects.create(id="tooled", name="greet", history_mark="T")
    history_cache.invalidate("tooled")
    assert Workflow.objects.get(pk="tooled").history_mark == ""


@pytest.mark.parametrize("arrival", [False, True], ids=["quiet", "slow"])
def test_a_write_without_the_lease_during_a_run_survives_its_release(
    clock, cache, arrival
):
    handle = listening("during")
    lease = leases.claim("during")
    assert lease is None  # (not due) -- so claim as an operation does
    lease = leases.claim("during", run=False)
    driver = DjangoDriver(
        "during",
        lease_token=lease.token,
        private_loop=True,
        history_mark=lease.history_mark,
    )
    assert run_private(driver.list(b"")) and cache.hits == 1
    event = keys.event_key("taken")
    run_private(driver.set(event, b"\x00"))
    with db.atomic():  # a tool removes it without the lease meanwhile
        WorkflowKV.objects.filter(workflow_id="during", key=event).delete()
        history_cache.invalidate("during")
    if arrival:
        handle.send("ping", "meanwhile")  # the release's slow path
    releases.release(lease, driver, status=WorkflowStatus.SLEEPING)
    assert Workflow.objects.get(pk="during").history_mark == ""
    assert "during" in cache  # the run's copy, with the event row
    if not arrival:
        handle.send("ping", 0)
    with CaptureQueriesContext(connection) as queries:
        assert run_until_idle(handle) == "sleeping"
    assert history_reads(queries) and cache.hits == 1  # not served


# -- bounds ----------------------------------------------------------------------------
def rows(size, key=b"k"):
    return [(key, b"v" * (size - len(key)))]


def test_the_count_bound_evicts_the_least_recently_used():
    lru = HistoryCache()
    with override_settings(RIVET={"WORKFLOW_CACHE_SIZE": 2}):
        lru.store("a", "ta", rows(10), 10)
        lru.store("b", "tb", rows(10), 10)
        lru.store("a", "ta2", rows(10), 10)  # used again: now the most recent
        lru.store("c", "tc", rows(10), 10)
    assert "b" not in lru and "a" in lru and "c" in lru
    assert lru.take("a", "c:ta") is None  # an older token never matches
    assert lru.take("c", "c:tc") == (rows(10), 10) and len(lru) == 0


def test_the_byte_bound_evicts_the_least_recently_used():
    lru = HistoryCache()
    with override_settings(
        RIVET={"WORKFLOW_CACHE_SIZE": 10, "WORKFLOW_CACHE_BYTES": 25}
    ):
        lru.store("a", "t", rows(10), 10)
        lru.store("b", "t", rows(10), 10)
        lru.store("c", "t", rows(10), 10)
        assert "a" not in lru and lru.bytes == 20
        lru.store("huge", "t", rows(30), 30)  # over the bound alone: not kept
        assert "huge" not in lru and len(lru) == 2
        lru.store("b", "t", rows(20), 20)
    assert "c" not in lru and lru.bytes == 20


# -- the settings' checks -----------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "value", "check", "text"),
    [
        ("WORKFLOW_CACHE_SIZE", -1, "rivet.E704", rivet_checks.E704),
        ("WORKFLOW_CACHE_SIZE", "100", "rivet.E704", rivet_checks.E704),
        ("WORKFLOW_CACHE_SIZE", True, "rivet.E704", rivet_checks.E704),
        ("WORKFLOW_CACHE_BYTES", 0, "rivet.E705", rivet_checks.E705),
        ("WORKFLOW_CACHE_BYTES", 1.5, "rivet.E705", rivet_checks.E705),
    ],
)
def test_rivet_e704_and_e705_refuse_cache_bounds_of_another_kind(
    key, value, check, text
):
    with override_settings(RIVET={key: value}):
        found = [m for m in run_checks() if m.id.startswith("rivet.")]
    assert [(m.id, m.msg) for m in found] == [(check, text)]


def test_cache_bounds_of_their_kind_pass_the_checks():
    bounds = {"WORKFLOW_CACHE_SIZE": 0, "WORKFLOW_CACHE_BYTES": 1}
    with override_settings(RIVET=bounds):
        assert not [m for m in run_checks() if m.id in ("rivet.E704", "rivet.E705")]


# -- the working copy ------------------------------------------------------------------
def test_the_working_copy_follows_writes_and_deletions_like_the_database():
    generator = random.Random(46)

    def key():
        return bytes(generator.randrange(4) for _ in range(generator.randrange(1, 4)))

    with override_settings(RIVET=CACHE):
        copy = HistoryCopy("w", "token", "c:")
    truth: dict[bytes, bytes] = {}
    copy.loaded([])
    for _ in range(3000):
        kind = generator.randrange(5)
        with copy.applying():
            if kind <= 1:
                pairs = {key(): bytes([generator.randrange(256)]) for _ in range(
                    generator.choice([1, 3, 40])
                )}  # fmt: skip
                copy.upsert(pairs)
                truth.update(pairs)
            elif kind == 2:
                gone = [key() for _ in range(3)]
                copy.delete_keys(gone)
                for k in gone:
                    truth.pop(k, None)
            elif kind == 3:
                start, end = sorted([key(), key()])
                copy.delete_range(start, end)
                truth = {k: v for k, v in truth.items() if not start <= k < end}
            elif generator.randrange(10) == 0:
                prefix = key()[:1]
                copy.delete_prefix(prefix)
                upper = prefix_end(prefix)
                truth = {
                    k: v
                    for k, v in truth.items()
                    if not (k >= prefix and (upper is None or k < upper))
                }
        assert copy.rows == sorted(truth.items())
        assert copy.size == sum(len(k) + len(v) for k, v in truth.items())


def test_a_failed_write_drops_the_working_copy():
    with override_settings(RIVET=CACHE):
        copy = HistoryCopy("w", "token", "c:")
    copy.loaded([(b"a", b"1")])
    with pytest.raises(OSError), copy.applying():
        copy.upsert({b"b": b"2"})
        raise OSError("the commit's outcome is unknown")
    assert copy.rows is None
    with copy.applying():
        copy.upsert({b"c": b"3"})  # nothing recorded any more
    assert copy.rows is None


def test_a_driver_without_a_lease_never_caches(cache):
    assert not DjangoDriver("tool").history.on
    assert not DjangoDriver("run", lease_token="t").history.on
    assert DjangoDriver("run", lease_token="t", history_mark="c:").history.on


# -- the fault matrix with the cache on ------------------------------------------------
def test_a_cancelled_call_drops_the_copy_though_its_write_comes_later(cache):
    """A cancelled call's thread goes on: its write may land, and be recorded, late.

    The copy is given up at the cancel, not only when a recorded write
    failed: under load the full suite's fault matrix served a history that
    lacked such a write.
    """
    copy = HistoryCopy("wf-cancelled", "token", "c:")
    copy.loaded([(b"a", b"1")])
    with pytest.raises(asyncio.CancelledError), copy.applying():
        raise asyncio.CancelledError  # nothing recorded yet
    copy.upsert({b"b": b"2"})  # the thread reaches its write afterwards
    with db.atomic():
        copy.keep(True)
    assert cache.take("wf-cancelled", "c:token") is None


class ClaimingDriver:
    """A host's driver per run: each whole-history load releases and claims again.

    The previous driver's release keeps its working copy, as a clean
    release does, whatever fault stopped its run (a fault of the wrapper
    never leaves a call of the inner driver half done); the next driver is
    served from the cache when its claim proves it current, and what it is
    served is checked against the database.
    """

    def __init__(self, workflow_id: str, atomic: bool) -> None:
        self.workflow_id = workflow_id
        self.atomic_batch = atomic
        self.lease: leases.Lease | None = None
        self.driver = DjangoDriver(workflow_id, atomic_batch=atomic)
        self.worker_poll_interval = self.driver.worker_poll_interval

    def __getattr__(self, name):
        return getattr(self.driver, name)

    def _claim_again(self) -> None:
        with db.atomic():
            if self.lease is not None and leases.release(self.lease) is not None:
                self.driver.history.keep(True)
        self.lease = leases.claim(self.workflow_id, run=False)
        assert self.lease is not None
        self.driver = DjangoDriver(
            self.workflow_id,
            lease_token=self.lease.token,
            atomic_batch=self.atomic_batch,
            history_mark=self.lease.history_mark,
        )

    async def list(self, prefix: bytes):
        if prefix:
            return await self.driver.list(prefix)
        await sync_to_async(self._claim_again)()
        served = await self.driver.list(b"")
        assert served == await DjangoDriver(self.workflow_id).list(b"")
        return served


_ids = itertools.count()


async def claiming_driver(atomic: bool) -> ClaimingDriver:
    workflow_id = f"cached-fault-{next(_ids)}"
    await sync_to_async(Workflow.objects.create)(id=workflow_id, name="faults")
    return ClaimingDriver(workflow_id, atomic)


@pytest.mark.parametrize("live_wait", [0.0, 120.0], ids=["yield", "live"])
@pytest.mark.parametrize("atomic", [False, True], ids=["chunked", "atomic"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
async def test_faults_at_driver_calls_are_recovered_with_the_cache_on(
    scenario: Scenario, atomic: bool, live_wait: float, cache
):
    """Every call x every fault kind with the cache on, and the live window too."""
    with (
        freeze_time(1_700_000_000) as clock,
        override_settings(RIVET={**CACHE, "WORKFLOW_LIVE_WAIT": live_wait}),
    ):
        driver = await claiming_driver(atomic)
        expected = await reference(
            clock, scenario, driver.workflow_id, driver, live_wait
        )
        if live_wait and scenario.messages:
            assert expected.called["wait_for_messages"] > 0
        else:
            assert cache.hits > 0  # the runs after the first were served

        async def fresh():
            driver = await claiming_driver(atomic)
            return driver.workflow_id, driver

        await check_every_fault(clock, scenario, fresh, expected, live_wait)
