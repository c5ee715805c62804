from django.shortcuts import render


def index(request):
    """The home page: one link per part of the example."""
    return render(request, "index.html")
