"""The Server-Sent Events routes under uvicorn: a slow reader's cut, and resuming.

uvicorn's ``send`` waits while a client does not read (daphne's never does),
so the slow-reader bound takes another path there: the test of
tests/transport/test_e2e_sse.py, on uvicorn.
"""

import pytest

from tests.transport.test_e2e_sse import (  # noqa: F401 - fixtures and tests reused
    redis_layer,
    server_env_extra,
    test_a_reader_that_stops_reading_is_cut_off_then_resumes,
)

pytestmark = [pytest.mark.servers, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def server_kind():
    return "uvicorn"
