"""What the Python client must do wherever it runs: in process or over daphne."""

import pytest

from django_rivet import (
    ActionNotFound,
    ActorNotFound,
    Forbidden,
    InvalidArgs,
    UserError,
)
from django_rivet.exceptions import InternalError


def assert_errors_are_rebuilt(client):
    """Call failing actions through ``client``: each error comes back as its class."""
    counter = client.actor("counter", "errors")
    with pytest.raises(UserError) as error:
        counter.call("add_note_then_fail", "x")
    assert (error.value.group, error.value.code, error.value.metadata) == (
        "user",
        "refused",
        {"text": "x"},
    )
    for action, args, cls in [
        ("nope", (), ActionNotFound),
        ("increment", ("x",), InvalidArgs),
        ("crash", (), InternalError),
    ]:
        with pytest.raises(cls):
            counter.call(action, *args)
    with pytest.raises(ActorNotFound):
        client.actor("counter", "absent", create=False).call("getCount")
    with pytest.raises(UserError) as refused:
        client.actor("chatRoom", "private").call("history")
    assert refused.value.code == "token_required"
    with pytest.raises(Forbidden):
        client.actor("vault", "closed").call("open")
