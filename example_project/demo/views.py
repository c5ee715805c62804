from django.shortcuts import render


def index(request):
    """The demo page: rivet.js talks to the actors of this project."""
    return render(request, "demo/index.html")
