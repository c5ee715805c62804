"""What every management command shares: escaped output, CommandError for bad input.

A client chooses actor keys, workflow ids (``id=`` from an action's
argument) and message names; no command may print them raw (audit 2026-12:
``rivet_workflows list`` and ``cancel --dry-run`` printed terminal escapes),
and no argument out of range may end in a traceback.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from django_rivet import workflows
from django_rivet.management.base import printable
from django_rivet.testing import run_until_idle
from django_rivet.workflows import workflow
from django_rivet.workflows.registry import register_temporarily

pytestmark = pytest.mark.django_db

# Sets the terminal's title, rings its bell, starts a fake line and column,
# and hides what follows behind a right-to-left override.
HOSTILE = "\x1b]0;pwned\x07ord\x1b[2K\rer\tfake\ncol\u202edi\x9b2J"


def run(*args):
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def test_printable_escapes_every_control_and_reordering_character():
    shown = printable(HOSTILE)
    assert shown == (
        "\\x1b]0;pwned\\x07ord\\x1b[2K\\x0der\\x09fake\\x0acol\\u202edi\\x9b2J"
    )
    assert shown.isprintable()


def test_client_chosen_ids_are_printed_escaped_by_every_command():
    handle = workflows.start("approval", {}, id=HOSTILE)
    run_until_idle(handle)
    handle.send(HOSTILE)  # a message name: shown by the inspector's inbox
    outputs = [
        run("rivet_workflows", "list"),
        run("rivet_workflows", "list", "--waiting-for", "approve"),
        run("rivet_workflows", "cancel", "--dry-run"),
        run("rivet_check_replay"),
        run("rivet_inspect", "workflows"),
        run("rivet_inspect", "workflow", HOSTILE),
        run("rivet_inspect", "workflow", HOSTILE, "--json"),
        run("rivet_workflows", "cancel"),
    ]
    for text in outputs:
        assert not any(char in text for char in "\x1b\x07\r\u202e\x9b"), text
    listed = outputs[0].splitlines()
    # One line per workflow, its columns intact, then the count.
    assert len(listed) == 2 and listed[0].count("\t") == 5
    assert listed[0].startswith(printable(HOSTILE) + "\tapproval\t")
    assert f"would cancel {printable(HOSTILE)} (approval, sleeping)" in outputs[2]
    assert f"cancelled {printable(HOSTILE)}" in outputs[-1]


def test_a_command_error_carrying_an_id_is_escaped_too():
    err = io.StringIO()
    with pytest.raises(CommandError) as refused:
        call_command("rivet_inspect", "workflow", HOSTILE, stderr=err)
    assert "\x1b" not in str(refused.value)


@pytest.mark.parametrize(
    "args",
    [
        ["rivet_workflows", "list", "--limit", str(2**70)],
        ["rivet_workflows", "list", "--limit", "0"],
        ["rivet_workflows", "list", "--older-than", "99999999999999d"],
        ["rivet_workflows", "cancel", "--older-than", "1e9w"],
        ["rivet_check_replay", "--limit", str(2**64)],
        ["rivet_inspect", "workflows", "--limit", str(2**70)],
        ["rivet_inspect", "workflows", "--limit", "-1"],
        ["rivet_purge", "--dry-run", "--batch-size", str(10**12)],
        ["rivet_purge", "--batch-size", "0"],
        ["rivet_retry", "messages", str(2**70)],
        ["rivet_retry", "messages", "-5"],
        ["rivet_worker", "--once", "--poll-interval", "nan"],
        ["rivet_worker", "--once", "--poll-interval", "-1"],
        ["rivet_worker", "--once", "--poll-interval", "1e308"],
        ["rivet_backfill", "hourly", "--from", "0001-01-01", "--to", "0001-01-02"],
        [
            "rivet_backfill",
            "hourly",
            "--from",
            "9999-12-31T23:30",
            "--to",
            "9999-12-31",
        ],
    ],
)
def test_out_of_range_arguments_are_command_errors(args):
    with register_temporarily(hourly), pytest.raises(CommandError):
        run(*args)


@workflow(name="hourly", cron="0 * * * *", tz="UTC")
async def hourly(ctx, tick):
    return tick
