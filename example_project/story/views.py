import uuid

from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from django_rivet import workflows


def story_index(request):
    return render(request, "story/index.html")


@require_POST
def tell(request):
    """Start a story; its page follows the stream."""
    handle = workflows.start("story", None, id=f"story-{uuid.uuid4().hex[:12]}")
    return redirect("story:read", workflow_id=handle.workflow_id)


def read(request, workflow_id):
    handle = workflows.get(workflow_id)
    return render(request, "story/read.html", {"workflow_id": handle.workflow_id})
