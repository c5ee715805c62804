from django.db import models


class Order(models.Model):
    """An order; its progress is the ``order`` workflow ``workflow_id``."""

    org = models.CharField(max_length=64)
    item = models.CharField(max_length=100)
    amount = models.PositiveIntegerField(help_text="In cents.")
    workflow_id = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"#{self.pk} {self.item}"


class Payment(models.Model):
    """A charge of an order, written by the workflow's ``charge`` step.

    That step runs with ``transaction=True``: the row and the step's history
    entry commit together, so a retried or replayed workflow never charges
    twice. The rollback of the step sets ``refunded_at``.
    """

    order = models.OneToOneField(Order, on_delete=models.CASCADE)
    amount = models.PositiveIntegerField(help_text="In cents.")
    charged_at = models.DateTimeField(auto_now_add=True)
    refunded_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.amount / 100:.2f} EUR for order #{self.order_id}"
