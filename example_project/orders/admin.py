from django.contrib import admin

from .models import Order, Payment


class PaymentInline(admin.StackedInline):
    model = Payment
    extra = 0
    readonly_fields = ["amount", "charged_at", "refunded_at"]


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["id", "org", "item", "amount", "workflow_id", "created_at"]
    list_filter = ["org"]
    inlines = [PaymentInline]
