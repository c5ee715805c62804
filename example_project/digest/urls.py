from django.urls import path

from . import views

app_name = "digest"
urlpatterns = [path("", views.index, name="index")]
