from django.urls import path

from . import views

app_name = "chat"
urlpatterns = [path("<str:org>/<str:room>/", views.room, name="room")]
