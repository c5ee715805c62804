from django.http import JsonResponse
from django.shortcuts import get_object_or_404, render
from django_rivet import workflows

from .models import Order, Payment

ORG = "acme"  # one org in this example; the actors are keyed by org anyway


def order_list(request):
    orders = list(Order.objects.filter(org=ORG)[:50])
    handles = {order.pk: workflows.get(order.workflow_id) for order in orders}
    rows = [(order, handles[order.pk].status) for order in orders]
    return render(request, "orders/list.html", {"rows": rows, "org": ORG})


def order_detail(request, pk):
    order = get_object_or_404(Order, pk=pk)
    return render(request, "orders/detail.html", {"order": order})


def order_status(request, pk):
    """The workflow's status and history as JSON, for the order page."""
    order = get_object_or_404(Order, pk=pk)
    handle = workflows.get(order.workflow_id)
    # The status first: the workflow may finish during this request, and a
    # finished status commits with its output, so everything read after a
    # "completed" status has the output (read the other way round, the page
    # could see "completed" beside the output of before it finished).
    status = handle.status
    snapshot = handle.snapshot()  # an object: .state .input .output .error
    payment = Payment.objects.filter(order=order).first()
    return JsonResponse(
        {
            "status": status,
            "output": snapshot.output,
            "error": snapshot.error,  # {"name": ..., "message": ...} or None
            "payment": payment
            and {
                "amount": payment.amount,
                "refunded": payment.refunded_at is not None,
            },
            # HistoryEntry objects; created_at/completed_at are epoch seconds.
            "history": [
                {
                    "location": entry.location,
                    "kind": entry.kind,
                    "status": entry.status,
                    "attempts": entry.attempts,
                    "created_at": entry.created_at,
                    "completed_at": entry.completed_at,
                    "output": entry.output,
                    "error": entry.error,
                }
                for entry in handle.history()
            ],
        }
    )
