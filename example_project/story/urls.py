from django.urls import path

from . import views

app_name = "story"
urlpatterns = [
    path("", views.story_index, name="index"),
    path("tell/", views.tell, name="tell"),
    path("<str:workflow_id>/", views.read, name="read"),
]
