"""Gateway tokens masked in paths, query strings and log records (issue 40)."""

import logging
import subprocess
import sys

import pytest

from django_rivet.tokens import MaskGatewayTokens, mask_query, mask_tokens


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("/rivet/gateway/5f0c@s3cret/action/x", "/rivet/gateway/5f0c@***/action/x"),
        ("/rivet/gateway/5f0c@s3cret", "/rivet/gateway/5f0c@***"),
        (
            'GET /rivet/gateway/room/connect?rvt-key=a&rvt-token=s3cret HTTP/1.1"',
            'GET /rivet/gateway/room/connect?rvt-key=a&rvt-token=*** HTTP/1.1"',
        ),
        ("/x?rvt-token=s3cret&rvt-key=a", "/x?rvt-token=***&rvt-key=a"),
        # Not a token: an @ elsewhere, another parameter's name.
        ("/users/ann@example.com/", "/users/ann@example.com/"),
        ("/rivet/gateway/room/request/ann@example.com", None),
        ("/x?not-rvt-token=1&q=rvt-token", None),
    ],
)
def test_tokens_are_masked_and_nothing_else(text, masked):
    assert mask_tokens(text) == (text if masked is None else masked)


def test_a_query_string_alone_is_masked():
    assert mask_query("rvt-token=s3cret&rvt-key=a") == "rvt-token=***&rvt-key=a"
    assert mask_query("rvt-key=a") == "rvt-key=a"


def test_the_filter_masks_messages_and_arguments():
    # uvicorn.access's record: '%s - "%s %s HTTP/%s" %d' with the path in args.
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "POST", "/rivet/gateway/5f0c@s3cret/action/x", "1.1", 200),
        None,
    )  # fmt: skip
    assert MaskGatewayTokens().filter(record) is True
    assert "s3cret" not in record.getMessage()
    assert "/rivet/gateway/5f0c@***/action/x" in record.getMessage()
    named = logging.LogRecord("x", logging.INFO, __file__, 1, "%(path)s", None, None)
    named.args = {"path": "/g?rvt-token=s3cret"}
    MaskGatewayTokens().filter(named)
    assert named.getMessage() == "/g?rvt-token=***"


def test_a_piped_log_comes_out_masked():
    lines = 'a "GET /rivet/gateway/5f0c@s3cret/connect"\nb\n'
    done = subprocess.run(
        [sys.executable, "-m", "django_rivet.tokens"],
        input=lines, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert done.stdout == 'a "GET /rivet/gateway/5f0c@***/connect"\nb\n'
