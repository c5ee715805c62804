from django.contrib import admin

from .models import ChatMessage


@admin.register(ChatMessage)
class ChatMessageAdmin(admin.ModelAdmin):
    list_display = ["created_at", "org", "room", "nickname", "text"]
    list_filter = ["org", "room"]
    search_fields = ["nickname", "text"]
