from __future__ import annotations

from django.contrib import admin

from chat.models import (
    ChannelWindowAnchor,
    DiscordName,
    Document,
    EventQueue,
    Memory,
    MessageIndex,
    PlannerStep,
    ShortTermMemory,
    Turn,
    UnreadEvent,
)


@admin.register(Turn)
class TurnAdmin(admin.ModelAdmin):
    list_display = ("created_at", "persona_name", "channel_id", "reason", "status", "llm_ms")
    list_filter = ("status", "reason", "persona")
    search_fields = ("persona_name", "channel_id", "trigger_message_id", "reply_text")
    date_hierarchy = "created_at"
    readonly_fields = [field.name for field in Turn._meta.fields]


@admin.register(MessageIndex)
class MessageIndexAdmin(admin.ModelAdmin):
    list_display = ("message_id", "channel_id", "author_id", "persona", "webhook_id", "created_at")
    search_fields = ("message_id", "channel_id", "author_id")


@admin.register(EventQueue)
class EventQueueAdmin(admin.ModelAdmin):
    list_display = ("id", "channel_id", "message_id", "status", "created_at")
    list_filter = ("status",)


@admin.register(UnreadEvent)
class UnreadEventAdmin(admin.ModelAdmin):
    list_display = ("channel_id", "message_id", "author_id", "created_at")


@admin.register(PlannerStep)
class PlannerStepAdmin(admin.ModelAdmin):
    """Why an autonomous channel spoke: each planner step's prompt, decision and result."""

    list_display = ("created_at", "channel_id", "loop_id", "iteration", "action", "success")
    list_filter = ("success",)
    search_fields = ("channel_id", "loop_id", "decision", "result")
    readonly_fields = [field.name for field in PlannerStep._meta.fields]


@admin.register(ShortTermMemory)
class ShortTermMemoryAdmin(admin.ModelAdmin):
    list_display = (
        "persona",
        "channel_id",
        "user_id",
        "turns_since_refresh",
        "last_turn_at",
        "refreshed_at",
    )
    list_filter = ("persona",)


@admin.register(ChannelWindowAnchor)
class ChannelWindowAnchorAdmin(admin.ModelAdmin):
    list_display = ("channel_id", "anchor_message_id", "limit", "updated_at")


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin):
    """Read-only here: writes go through `chat.services.memory_store` (bounds, privacy,
    vectors), which the dashboard's memories screen uses."""

    list_display = ("guild_id", "kind", "user_id", "persona", "text", "source", "updated_at")
    list_filter = ("kind", "source")
    search_fields = ("text", "user_id", "subject_name")
    readonly_fields = [field.name for field in Memory._meta.fields]


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    list_display = ("guild_id", "name", "content_type", "status", "chunks_done", "chunks_total")
    list_filter = ("status", "content_type")
    readonly_fields = [field.name for field in Document._meta.fields]


@admin.register(DiscordName)
class DiscordNameAdmin(admin.ModelAdmin):
    """The names kept from the gateway, read-only: the worker writes them."""

    list_display = ("kind", "name", "discord_id", "guild_id", "updated_at")
    list_filter = ("kind",)
    search_fields = ("name", "discord_id")
    readonly_fields = [field.name for field in DiscordName._meta.fields]
