from django.db import models


class Note(models.Model):
    """A project model that actor handlers write, to test atomicity."""

    text = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.text
