from django.http import Http404
from django.shortcuts import render

from .actors import MAX_NICKNAME

NAME_LIMIT = 64


def room(request, org, room):
    """A chat room page; rivet.js joins the ``chatRoom`` actor [org, room]."""
    if len(org) > NAME_LIMIT or len(room) > NAME_LIMIT:
        raise Http404("No such room")
    return render(
        request,
        "chat/room.html",
        {"org": org, "room": room, "max_nickname": MAX_NICKNAME},
    )
