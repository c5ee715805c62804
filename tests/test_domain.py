"""The value domain's walks (``django_rivet.domain``), beyond what the codecs test.

``check_value`` decides the common tiny values (no arguments, a number, a
flag, an ASCII string) before it sets up a walk (issue 29): the answers and
the errors must be those of the walk.
"""

from __future__ import annotations

import datetime
import decimal
import fractions
import threading
import time
import uuid

import cbor2
import pytest

from django_rivet import domain
from django_rivet.domain import check_value, paced
from django_rivet.exceptions import InvalidValue

TOP_LEVEL = [
    None,
    True,
    0,
    -1,
    2**63 - 1,
    -(2**63),
    2**63,
    -(2**63) - 1,
    2**200,
    1.5,
    float("nan"),
    float("inf"),
    "",
    "ascii",
    "é and ☃",
    "\ud800",
    b"",
    b"\x00\xff",
    bytearray(b"x"),
    (),
    [],
    {},
    datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC),
    datetime.date(2026, 12, 2),
    uuid.UUID(int=1),
    decimal.Decimal("1.5"),
    fractions.Fraction(1, 3),
    complex(1, 2),
    {1, 2},
    frozenset(),
    cbor2.undefined,
    object(),
]


def outcome(value, where):
    try:
        return check_value(value, where)
    except InvalidValue as exc:
        return type(exc), exc.message, exc.metadata


@pytest.mark.parametrize("value", TOP_LEVEL, ids=repr)
def test_a_top_level_value_is_judged_as_the_same_value_nested(value):
    # The nested form always goes through the walk; the error names the same
    # reason, one path step further.
    nested = outcome([value], "args")
    alone = outcome(value, "args[0]")
    if isinstance(nested, int):
        assert alone == nested - 1  # the list's one item is not counted
    else:
        assert alone == nested


def test_tiny_values_are_counted_as_holding_no_entries():
    for value in (None, 7, "x", (), [], {}, b"", True):
        assert check_value(value) == 0
    assert check_value({"n": 1}) == 1
    assert check_value([[], {}]) == 2


def test_out_of_range_arguments_name_the_path_from_where():
    with pytest.raises(InvalidValue) as caught:
        check_value(2**63, "output")
    assert caught.value.metadata == {
        "path": "output",
        "reason": "integers are 64-bit (from -2**63 to 2**63 - 1)",
    }


def test_only_walks_in_a_paced_thread_pause(monkeypatch):
    # time.sleep is the process's: threads other tests left running (their
    # invocation and feed threads) sleep for real and are not counted.
    pauses = []
    sleep = time.sleep
    walkers = {"plain", threading.current_thread().name}

    def record(seconds):
        if threading.current_thread().name in walkers:
            pauses.append(threading.current_thread().name)
        else:
            sleep(seconds)

    monkeypatch.setattr(domain.time, "sleep", record)
    big = [[0] * (domain.PACE_ITEMS + 1)]
    seen = {}

    def walk(name):
        seen[name] = check_value(big)

    # A thread that never entered paced() reads the default (off).
    thread = threading.Thread(target=walk, args=("plain",), name="plain")
    thread.start()
    thread.join()
    assert pauses == []
    with paced():
        walk("paced")
    assert pauses and set(pauses) == {threading.current_thread().name}
    assert seen["plain"] == seen["paced"] == domain.PACE_ITEMS + 2
