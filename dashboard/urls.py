from __future__ import annotations

from django.urls import URLPattern, path

from dashboard import live_views, memory_views, row_views, usage_views, views

app_name = "dashboard"

guild = "guilds/<int:guild_id>/"


def rows_urls(prefix: str, url_id: str, kind: row_views.RowKind) -> list[URLPattern]:
    """The list, edit and delete URLs of one kind of a guild's rows."""
    row = f"{guild}{prefix}<int:{url_id}>/"
    return [
        path(guild + prefix, row_views.rows_page, {"kind": kind}, name=f"{kind.name}_list"),
        path(row, row_views.row_page, {"kind": kind}, name=kind.name),
        path(row + "delete/", row_views.row_delete, {"kind": kind}, name=f"{kind.name}_delete"),
    ]


urlpatterns = [
    path("", views.index, name="index"),
    path("healthz", views.healthz, name="healthz"),
    path("guilds/new/", views.guild_new, name="guild_new"),
    path(guild, views.guild_detail, name="guild"),
    path(guild + "lorebook/", views.guild_lorebook_editor, name="guild_lorebook_editor"),
    path(guild + "personas/", views.persona_list, name="persona_list"),
    path(guild + "personas/new/", views.persona_new, name="persona_new"),
    path(guild + "personas/import-card/", views.card_import, name="card_import"),
    path(guild + "personas/<int:persona_id>/", views.persona_detail, name="persona"),
    path(guild + "personas/<int:persona_id>/delete/", views.persona_delete, name="persona_delete"),
    path(
        guild + "personas/<int:persona_id>/greet/", views.persona_greet_view, name="persona_greet"
    ),
    path(
        guild + "personas/<int:persona_id>/lorebook/",
        views.lorebook_editor,
        name="lorebook_editor",
    ),
    path(
        guild + "personas/<int:persona_id>/chat-preset/",
        views.chat_preset_upload,
        name="chat_preset_upload",
    ),
    path(
        guild + "personas/<int:persona_id>/card.<str:fmt>",
        views.card_export,
        name="card_export",
    ),
    *rows_urls("channels/", "channel_id", row_views.CHANNELS),
    *rows_urls("blocks/", "block_id", row_views.BLOCKS),
    *rows_urls("users/", "user_id", row_views.USERS),
    path(guild + "memories/", memory_views.memory_list, name="memory_list"),
    path(guild + "memories/<int:memory_id>/edit/", memory_views.memory_edit, name="memory_edit"),
    path(guild + "documents/", memory_views.document_list, name="document_list"),
    path(guild + "documents/rows/", memory_views.document_rows, name="document_rows"),
    path(
        guild + "documents/<int:document_id>/delete/",
        memory_views.document_remove,
        name="document_delete",
    ),
    path(
        guild + "memories/<int:memory_id>/delete/",
        memory_views.memory_delete,
        name="memory_delete",
    ),
    path(guild + "usage/", usage_views.guild_usage, name="usage"),
    path("usage/", usage_views.all_usage, name="usage_all"),
    path("personas/token-count/", views.token_count, name="token_count"),
    path("personas/sample-row/", views.sample_row, name="sample_row"),
    path("lorebook/test/", views.lorebook_test, name="lorebook_test"),
    path("personas/avatar-preview/", views.avatar_preview, name="avatar_preview"),
    path("config/export/", views.config_export_view, name="config_export"),
    path("config/import/", views.config_import_view, name="config_import"),
    path("channels/<int:channel_id>/", live_views.channel_live, name="channel_live"),
    path("channels/<int:channel_id>/preview/", live_views.channel_preview, name="preview"),
    path("turns/", live_views.turn_list, name="turn_list"),
    path("turns/<int:turn_id>/", live_views.turn_detail, name="turn"),
    path("turns/<int:turn_id>/replay/", live_views.turn_replay_view, name="turn_replay"),
    path("why/", live_views.why_view, name="why"),
    path("playground/", live_views.playground, name="playground"),
]
