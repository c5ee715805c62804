from django.apps import AppConfig


class StoryConfig(AppConfig):
    name = "story"
    default_auto_field = "django.db.models.BigAutoField"
