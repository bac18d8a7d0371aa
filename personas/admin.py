from __future__ import annotations

from django.contrib import admin

from personas.models import Block, ChannelConfig, GuildConfig, Persona, UserPrivacy


class PersonaInline(admin.TabularInline):
    model = Persona
    fields = ("name", "is_main", "enabled", "llm_model")
    extra = 0
    show_change_link = True


class ChannelInline(admin.TabularInline):
    model = ChannelConfig
    fields = ("channel_id", "mode", "enabled", "message_fetch_limit")
    extra = 0


@admin.register(GuildConfig)
class GuildConfigAdmin(admin.ModelAdmin):
    list_display = ("name", "guild_id", "timezone", "message_fetch_limit")
    search_fields = ("name", "guild_id")
    inlines = [PersonaInline, ChannelInline]


@admin.register(Persona)
class PersonaAdmin(admin.ModelAdmin):
    list_display = ("name", "guild", "is_main", "enabled", "llm_model", "deliberate_tool_mode")
    list_filter = ("guild", "is_main", "enabled")
    search_fields = ("name",)


@admin.register(ChannelConfig)
class ChannelConfigAdmin(admin.ModelAdmin):
    list_display = ("channel_id", "guild", "mode", "enabled", "message_fetch_limit")
    list_filter = ("guild", "mode", "enabled")


@admin.register(Block)
class BlockAdmin(admin.ModelAdmin):
    list_display = ("user_id", "persona", "guild", "type", "expires_at", "reason")
    list_filter = ("guild", "type")
    search_fields = ("user_id",)


@admin.register(UserPrivacy)
class UserPrivacyAdmin(admin.ModelAdmin):
    list_display = ("user_id", "level", "blacklisted", "guild")
    list_filter = ("level", "blacklisted")
    search_fields = ("user_id",)
