from django.db import models


class ChatMessage(models.Model):
    """The full history of a room; the actor's state keeps only the recent part.

    Rows are written by the ``chatRoom`` actor inside its invocation, so a
    message is in the history exactly when it is in the room's state.
    """

    org = models.CharField(max_length=64)
    room = models.CharField(max_length=64)
    nickname = models.CharField(max_length=32)
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["org", "room", "id"], name="chat_room_idx")]

    def __str__(self) -> str:
        return f"{self.org}/{self.room} {self.nickname}: {self.text[:40]}"
