from django.shortcuts import render


def counter(request):
    """The counter and clock page: rivet.js talks to the demo actors."""
    return render(request, "demo/counter.html")
