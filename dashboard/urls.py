from __future__ import annotations

from django.urls import path

from dashboard import live_views, memory_views, views

app_name = "dashboard"

guild = "guilds/<int:guild_id>/"

urlpatterns = [
    path("", views.index, name="index"),
    path("healthz", views.healthz, name="healthz"),
    path("guilds/new/", views.guild_new, name="guild_new"),
    path(guild, views.guild_detail, name="guild"),
    path(guild + "personas/", views.persona_list, name="persona_list"),
    path(guild + "personas/new/", views.persona_new, name="persona_new"),
    path(guild + "personas/import-card/", views.card_import, name="card_import"),
    path(guild + "personas/<int:persona_id>/", views.persona_detail, name="persona"),
    path(guild + "personas/<int:persona_id>/delete/", views.persona_delete, name="persona_delete"),
    path(
        guild + "personas/<int:persona_id>/greet/", views.persona_greet_view, name="persona_greet"
    ),
    path(
        guild + "personas/<int:persona_id>/card.<str:fmt>",
        views.card_export,
        name="card_export",
    ),
    path(guild + "channels/", views.channel_list, name="channel_list"),
    path(guild + "channels/<int:channel_id>/", views.channel_detail, name="channel"),
    path(guild + "channels/<int:channel_id>/delete/", views.channel_delete, name="channel_delete"),
    path(guild + "blocks/", views.block_list, name="block_list"),
    path(guild + "blocks/<int:block_id>/", views.block_detail, name="block"),
    path(guild + "blocks/<int:block_id>/delete/", views.block_delete, name="block_delete"),
    path(guild + "users/", views.user_list, name="user_list"),
    path(guild + "users/<int:user_id>/delete/", views.user_delete, name="user_delete"),
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
