from __future__ import annotations

from django.urls import URLPattern, path

from dashboard import (
    going_live_views,
    live_views,
    memory_views,
    persona_test_views,
    row_views,
    usage_views,
    views,
)

app_name = "dashboard"

guild = "guilds/<int:guild_id>/"
tests = guild + "personas/<int:persona_id>/tests/"


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
    path(tests, persona_test_views.persona_tests, name="persona_tests"),
    path(tests + "import/", persona_test_views.persona_tests_import, name="persona_tests_import"),
    path(tests + "export/", persona_test_views.persona_tests_export, name="persona_tests_export"),
    path(tests + "run/", persona_test_views.persona_tests_run, name="persona_tests_run"),
    path(
        tests + "cases/<int:case_id>/",
        persona_test_views.persona_test_case,
        name="persona_test_case",
    ),
    path(
        tests + "cases/<int:case_id>/delete/",
        persona_test_views.persona_test_case_delete,
        name="persona_test_case_delete",
    ),
    path(
        tests + "runs/<int:run_id>/", persona_test_views.persona_test_run, name="persona_test_run"
    ),
    path(
        tests + "runs/<int:run_id>/results/<int:result_id>/request/",
        persona_test_views.persona_test_result_request,
        name="persona_test_result_request",
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
    path(guild + "audit/", views.guild_audit_view, name="audit"),
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
    path("turns/<int:turn_id>/withheld/", live_views.turn_withheld, name="turn_withheld"),
    path(
        "turns/<int:turn_id>/save-case/", persona_test_views.turn_save_case, name="turn_save_case"
    ),
    path("why/", live_views.why_view, name="why"),
    path("playground/", live_views.playground, name="playground"),
    path("deployment/", going_live_views.deployment_card, name="deployment"),
    path("deployment/check/", going_live_views.deployment_check, name="deployment_check"),
]
