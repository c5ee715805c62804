from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.urls import include, path

from . import views

urlpatterns = [
    path("", views.index, name="index"),
    path("chat/", include("chat.urls")),
    path("orders/", include("orders.urls")),
    path("digest/", include("digest.urls")),
    path("counter/", include("demo.urls")),
    path("story/", include("story.urls")),
    path("admin/", admin.site.urls),
    path("rivet/", include("django_rivet.urls")),
]

# Plain daphne serves no static files: in development (DEBUG) Django does,
# so the pages can load rivet.js. In production, collectstatic and a proxy
# (or WhiteNoise) serve them; see docs/deployment.md.
urlpatterns += staticfiles_urlpatterns()
