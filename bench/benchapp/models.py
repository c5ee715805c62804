from django.db import models


class Row(models.Model):
    """The baseline's row: locked and updated by the raw-ORM transaction."""

    name = models.CharField(max_length=64, unique=True)
    value = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return self.name
