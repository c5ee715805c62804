from django.db import models


class Note(models.Model):
    """A project model that actor handlers write, to test atomicity."""

    text = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.text


class StepRow(models.Model):
    """A row written by a workflow step, to count how often a step's effect ran."""

    workflow_id = models.CharField(max_length=255)
    step = models.CharField(max_length=100)
    transactional = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.workflow_id}/{self.step}"
