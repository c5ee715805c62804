"""Views used by the browser end-to-end test (tests/transport/test_browser.py)."""

from django.shortcuts import render


def browser_page(request):
    """A page driving rivet.js: connect, call, render events."""
    return render(request, "rivet_test/browser.html")


def stream_page(request):
    """A page following a workflow's stream with rivet.js (EventSource)."""
    return render(request, "rivet_test/stream.html")
