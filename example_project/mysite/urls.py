from demo import views
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", views.index, name="index"),
    path("admin/", admin.site.urls),
    path("rivet/", include("django_rivet.urls")),
]
