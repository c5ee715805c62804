from demo import views
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", views.index, name="index"),
    path("admin/", admin.site.urls),
    path("rivet/", include("django_rivet.urls")),
]

# daphne serves no static files: in development (DEBUG) Django does, so the
# demo page can load rivet.js.
from django.contrib.staticfiles.urls import staticfiles_urlpatterns  # noqa: E402

urlpatterns += staticfiles_urlpatterns()
