from django.shortcuts import render


def index(request):
    return render(request, "digest/index.html", {"org": "acme"})
