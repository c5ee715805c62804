"""A chat room per ``[org, room]`` key."""

from django_rivet import Actor, Forbidden, UserError, action

from .models import ChatMessage

RECENT = 50  # messages kept in the actor's state; the model has them all
MAX_NICKNAME = 32
MAX_TEXT = 500


class ChatRoom(Actor):
    """Recent messages in the state, the whole history in ``ChatMessage``.

    People join over a WebSocket with their nickname in the connection
    params (``{"nickname": "ann"}``) and talk with ``send_message``; each
    message is broadcast as a ``newMessage`` event. Server-side code (the
    digest, the order workflow) posts with ``post``.
    """

    name = "chatRoom"
    initial_state = {"recent": []}

    def on_auth(self, ctx, info):
        # Over HTTP, only reading is allowed: talking needs a connection
        # (whose nickname on_before_connect checked), posting is server-side
        # (server-side calls skip on_auth).
        if info.transport == "http" and info.action != "recent":
            raise Forbidden("Join the room over a WebSocket to talk")

    def on_before_connect(self, ctx, params):
        nickname = _nickname(params)
        if not nickname:
            raise UserError("Pick a nickname to join", code="nickname_required")
        if len(nickname) > MAX_NICKNAME:
            raise UserError("That nickname is too long", code="nickname_too_long")

    def create_conn_state(self, ctx, params):
        return {"nickname": _nickname(params)}

    @action
    def send_message(self, ctx, text: str) -> dict:
        if ctx.conn is None:
            raise UserError("Join the room to talk", code="not_joined")
        return _post(ctx, ctx.conn.state["nickname"], text)

    @action
    def post(self, ctx, nickname: str, text: str) -> dict:
        if ctx.conn is not None:
            raise UserError("Use send_message", code="server_side_only")
        return _post(ctx, nickname, text)

    @action
    def recent(self, ctx) -> list:
        return ctx.state["recent"]


def _nickname(params) -> str:
    nickname = params.get("nickname") if isinstance(params, dict) else None
    return nickname.strip() if isinstance(nickname, str) else ""


def _post(ctx, nickname: str, text: str) -> dict:
    text = text.strip()
    if not text:
        raise UserError("Say something", code="empty_message")
    if len(text) > MAX_TEXT:
        raise UserError(f"At most {MAX_TEXT} characters", code="message_too_long")
    org, room = ctx.key
    # The row commits with the state change below, or neither does.
    row = ChatMessage.objects.create(org=org, room=room, nickname=nickname, text=text)
    message = {
        "id": row.pk,
        "nickname": nickname,
        "text": text,
        "at": row.created_at.isoformat(),
    }
    ctx.state["recent"] = [*ctx.state["recent"], message][-RECENT:]
    ctx.broadcast("newMessage", message)
    return message
