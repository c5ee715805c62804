"""Hostile input at volume (issue 12): shared strategies, checks and totals.

How many cases run is ``RIVET_HOSTILE``'s choice:

* unset (``sample``, the SQLite leg of ``make test``): a tenth of each
  volume, from a fixed seed -- the same cases every run, so a failure
  reproduces and a run never fails by luck;
* ``smoke`` (the PostgreSQL and Python 3.12 legs): a twentieth, fixed seed;
* ``full``: every case, at least 10,000, from a fresh random seed each run.
  Run it when touching parsing, codecs or limits (CONTRIBUTING.md).

The totals (cases, distinct error codes) are printed at the end of the
session by tests/conftest.py.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

import cbor2
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from django_rivet.exceptions import ERROR_CLASSES

MODE = os.environ.get("RIVET_HOSTILE", "sample")
#: Each volume is divided by this; ``full`` runs it whole, at random.
DIVISOR = {"full": 1, "sample": 10, "smoke": 20}.get(MODE)
if DIVISOR is None:
    raise ValueError(f"RIVET_HOSTILE={MODE!r}: expected full, sample or smoke")
#: Codes an answer may carry besides the known ones (user errors are "user/*").
KNOWN = {f"{group}/{code}" for group, code in ERROR_CLASSES} - {"rivet/internal_error"}


class Totals:
    """What the hostile tests sent and which error codes came back."""

    def __init__(self) -> None:
        self.cases = 0
        self.codes: Counter[str] = Counter()

    def record(self, code: str | None) -> None:
        self.cases += 1
        if code is not None:
            self.codes[code] += 1


TOTALS = Totals()


def examples(count: int) -> settings:
    """Hypothesis settings for ``count`` cases (fewer, fixed, unless ``full``)."""
    return settings(
        max_examples=max(5, count // DIVISOR),
        # A fixed seed per test for the sample: the volume that asserts
        # something (10,000 distinct cases) is the opt-in full run.
        derandomize=DIVISOR > 1,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.function_scoped_fixture,
            HealthCheck.filter_too_much,
        ],
    )


def check_error(body: Any) -> str:
    """Return ``group/code`` of an error body; fail unless it is coded."""
    assert isinstance(body, dict), body
    assert set(body) >= {"group", "code", "message", "metadata"}, body
    qualified = f"{body['group']}/{body['code']}"
    assert qualified != "rivet/internal_error", body
    assert body["group"] == "user" or qualified in KNOWN, body
    return qualified


# -- values -------------------------------------------------------------------------
surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
texts = (
    st.text(max_size=12)
    | st.text(alphabet=surrogates, min_size=1, max_size=2)
    # NUL (PostgreSQL text refuses it), line breaks (log forging).
    | st.sampled_from(["\x00", "a\x00b", "\n", "x\r\ny"])
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | texts
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4)
    ),
    max_leaves=12,
)
cbor_keys = texts | st.integers() | st.binary(max_size=4) | st.floats() | st.booleans()
cbor_scalars = (
    scalars
    | st.binary(max_size=16)
    | st.just(cbor2.undefined)
    | st.integers(min_value=0, max_value=19).map(cbor2.CBORSimpleValue)
    | st.integers(min_value=32, max_value=255).map(cbor2.CBORSimpleValue)
    | st.uuids()
)
cbor_values = st.recursive(
    cbor_scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(cbor_keys, children, max_size=4)
        | st.builds(cbor2.CBORTag, st.integers(min_value=0, max_value=2**32), children)
    ),
    max_leaves=12,
)


def cbor_head(major: int, length: int) -> bytes:
    if length < 24:
        return bytes([major << 5 | length])
    for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if length < 256**size:
            return bytes([major << 5 | info]) + length.to_bytes(size, "big")
    raise ValueError(length)


huge_lengths = st.builds(
    lambda major, length, tail: cbor_head(major, length) + tail,
    st.sampled_from([2, 3, 4, 5]),  # bytes, text, array, map
    st.integers(min_value=2**16, max_value=2**64 - 1),
    st.binary(max_size=8),
)


def _cbor(value: Any) -> bytes | None:
    try:
        return cbor2.dumps(value)
    except Exception:
        return None


def _json(value: Any) -> str | None:
    try:
        return json.dumps(value, allow_nan=True)
    except ValueError:  # integers over Python's 4300-digit str limit
        return None


def nested(open_: str, close: str, depth: int) -> str:
    return open_ * depth + close * depth


#: A body or frame payload: JSON text or CBOR bytes, mostly invalid.
def payloads(envelope: Any) -> st.SearchStrategy[tuple[str, bytes | str]]:
    """Payloads in both encodings; ``envelope(value)`` wraps a random value."""
    json_text = (
        json_values.map(lambda v: _json(envelope(v))).filter(bool)
        | json_values.map(_json).filter(bool)
        | st.integers(min_value=100, max_value=3000).map(
            lambda n: str(_json(envelope(0))).replace("0", nested("[", "]", n), 1)
        )
        | st.text(max_size=64)
        | st.sampled_from(["", "{", "[1,]", "NaN", "1e999", '{"args": [1e999]}'])
        # Integers JSON readers refuse (over 4300 digits).
        | st.integers(min_value=4301, max_value=5000).map(
            lambda n: '{"args": [' + "9" * n + "]}"
        )
    )
    cbor_bytes = (
        cbor_values.map(lambda v: _cbor(envelope(v))).filter(bool)
        | cbor_values.map(_cbor).filter(bool)
        | huge_lengths
        | huge_lengths.map(lambda raw: b"\xa1\x64args\x81" + raw)
        | st.integers(min_value=100, max_value=3000).map(
            lambda n: b"\x81" * n + b"\x00"
        )
        | st.binary(max_size=256)
        # A bignum JSON could not carry (tag 2, 2000 bytes).
        | st.binary(min_size=2000, max_size=2000).map(
            lambda raw: b"\xa1\x64args\x81\xc2\x59\x07\xd0" + raw
        )
    )
    return st.tuples(st.just("json"), json_text) | st.tuples(
        st.just("cbor"), cbor_bytes
    )
