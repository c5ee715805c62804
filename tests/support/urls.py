from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("rivet/", include("django_rivet.urls")),
    path("metrics/", include("django_rivet.metrics")),
]

# -- transport tests: the rivet.js page of tests/transport/test_browser.py -------------
from django.contrib.staticfiles.views import serve as _serve_static  # noqa: E402
from django.urls import re_path  # noqa: E402

from tests.support import e2e_views  # noqa: E402

urlpatterns += [
    path("rivet-test/browser/", e2e_views.browser_page),
    path("rivet-test/stream/", e2e_views.stream_page),
    # daphne serves no static files itself; DEBUG is off in the tests.
    re_path(r"^static/(?P<path>.*)$", _serve_static, {"insecure": True}),
]
