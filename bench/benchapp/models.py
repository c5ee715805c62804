from django.db import models


class Row(models.Model):
    """The baselines' row: locked, read and written like an actor's state."""

    name = models.CharField(max_length=64, unique=True)
    state = models.BinaryField(default=b"")
    version = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return self.name


class Entry(models.Model):
    """P5's commit floor: one row inserted per durable transaction."""

    value = models.BinaryField()

    def __str__(self) -> str:
        return f"entry {self.pk}"
