import pytest


@pytest.fixture(autouse=True)
def _no_embedded_worker(settings):
    """Tests run due work themselves (run_due, run_until_idle), not a thread.

    With ``EMBEDDED_WORKER`` on, the first request of a test client would
    start the worker loop in the test process.
    """
    settings.RIVET = {**settings.RIVET, "EMBEDDED_WORKER": False}
