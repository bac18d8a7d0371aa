"""Who sees and changes what: anonymous, other users, moderators, admins (DESIGN §3)."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.test import Client
from django.urls import URLPattern, reverse

from chat.models import Document, Memory, PersonaTestResult, PersonaTestRun, Turn
from dashboard import urls as dashboard_urls
from personas.models import Block, GuildConfig, Persona
from personas.models_cases import PersonaTestCase

pytestmark = pytest.mark.django_db

# healthz is the process supervisor's liveness probe: it answers {"status": "ok"} and nothing
# else, so it is the one URL without a login.
PUBLIC = {"healthz"}
# GET-only views (downloads and pages); every other URL changes or may change configuration
# on POST.
GET_ONLY = {
    "audit",
    "index",
    "persona_list",
    "card_export",
    "config_export",
    "sample_row",
    "avatar_preview",
    "channel_live",
    "preview",
    "turn_list",
    "turn",
    "turn_withheld",
    "why",
    "document_rows",
    "deployment",
    "persona_tests_export",
    "persona_test_run",
    "persona_test_result_request",
    "usage",
    "usage_all",
}
# POSTs that change nothing (dry runs): every viewer may send them.
VIEWER_POSTS = {"turn_replay"}
# Screens for admins alone (the playground and adding a guild: operators alone).
ADMIN_SCREENS = {
    "playground",
    "lorebook_editor",
    "guild_lorebook_editor",
    "guild_new",
    # A guild's persona tests are its admins' alone.
    "persona_tests",
    "persona_test_case",
    "persona_tests_export",
    "persona_test_run",
    "persona_test_result_request",
    "usage_all",
}
# htmx helpers that exist only for the edit forms (admins).
ADMIN_HELPERS = {"token_count", "sample_row", "avatar_preview", "lorebook_test"}
POST_ONLY = {
    "persona_delete",
    "channel_delete",
    "block_delete",
    "user_delete",
    "memory_edit",
    "memory_delete",
    "document_delete",
    "card_import",
    "token_count",
    "lorebook_test",
    "persona_greet",
    "chat_preset_upload",
    "turn_replay",
    "deployment_check",
    "persona_tests_import",
    "persona_tests_run",
    "persona_test_case_delete",
    "turn_save_case",
}


def _kwargs(pattern: URLPattern, guild: GuildConfig) -> dict:
    tomori = Persona.objects.get(guild=guild, name="Tomori")
    block = Block.objects.filter(guild=guild).first()
    turn, _ = Turn.objects.get_or_create(
        channel_id=1200000000000000001,
        defaults={"guild_id": guild.guild_id, "persona_name": "Tomori", "reason": "mention"},
    )
    values = {
        "guild_id": guild.guild_id,
        "persona_id": tomori.pk,
        "channel_id": 1200000000000000001,
        "block_id": block.pk,
        "user_id": 1300000000000000003,
        "fmt": "json",
        "turn_id": turn.pk,
        "memory_id": _memory(guild).pk,
        "document_id": _document(guild).pk,
        **_persona_test(tomori),
    }
    return {name: values[name] for name in pattern.pattern.converters}


def _persona_test(persona: Persona) -> dict[str, int]:
    """A case of the persona, a run of it and one result with its request."""
    case, _ = PersonaTestCase.objects.get_or_create(
        persona=persona,
        name="greets",
        defaults={"spec": {"name": "greets", "message": {"author": "alice", "content": "hi"}}},
    )
    run = PersonaTestRun.objects.filter(persona=persona).first() or PersonaTestRun.objects.create(
        persona=persona,
        persona_name=persona.name,
        guild_id=persona.guild.guild_id,
        origin="dashboard",
        targets=[{"key": "saved", "label": "saved", "model": ""}],
        cases=[
            {
                "case": case.spec,
                "persona_id": persona.pk,
                "persona": persona.name,
                "guild": str(persona.guild.guild_id),
                "case_id": case.pk,
            }
        ],
        status="finished",
        total=1,
        done=1,
    )
    result = run.results.first() or PersonaTestResult.objects.create(
        run=run,
        case=case,
        case_name="greets",
        persona_name=persona.name,
        target="saved",
        reply="hello",
        passed=True,
        prompt_record={
            "request": {"model": "m", "messages": [{"role": "user", "content": "alice: hi"}]},
            "items": [
                {
                    "index": 0,
                    "tag": "dialogue_history",
                    "role": "user",
                    "text": "alice: hi",
                    "tokens": 3,
                    "source_ids": [],
                }
            ],
            "tokens": {
                "total": 3,
                "budget": 100,
                "by_tag": {"dialogue_history": 3},
                "counter": "o200k",
            },
            "cache_prefix_end": 0,
            "tools": [],
            "truncation": {
                "batches": 0,
                "removed_entries": 0,
                "removed_message_ids": [],
                "warning": None,
            },
            "recalled": [],
        },
    )
    return {"case_id": case.pk, "run_id": run.pk, "result_id": result.pk}


def _memory(guild: GuildConfig) -> Memory:
    memory, _ = Memory.objects.get_or_create(
        guild_id=guild.guild_id, kind="guild", defaults={"text": "Movie night", "source": "admin"}
    )
    return memory


def _document(guild: GuildConfig) -> Document:
    document, _ = Document.objects.get_or_create(
        guild_id=guild.guild_id,
        name="rules.md",
        defaults={"content_type": "markdown", "size": 5, "text": "Rules"},
    )
    return document


def dashboard_urls_list(guild: GuildConfig) -> list[tuple[str, str]]:
    """(name, path) of every dashboard URL, with ids of the fixture guild's rows."""
    return [
        (p.name, reverse(f"dashboard:{p.name}", kwargs=_kwargs(p, guild)))
        for p in dashboard_urls.urlpatterns
        if p.name not in PUBLIC
    ]


def test_the_url_walk_covers_every_dashboard_url(guild):
    names = {name for name, _ in dashboard_urls_list(guild)} | PUBLIC
    assert names == {p.name for p in dashboard_urls.urlpatterns}
    assert len(names) > 20


@pytest.mark.parametrize("method", ["get", "post"])
def test_anonymous_visitors_are_sent_to_the_login_page_from_every_url(guild, method):
    client = Client()
    for name, path in dashboard_urls_list(guild):
        if (method == "get" and name in POST_ONLY) or (method == "post" and name in GET_ONLY):
            continue
        response = getattr(client, method)(path)
        assert response.status_code == 302, (name, path, response.status_code)
        assert response["Location"] == f"{reverse('login')}?next={path}", name


def test_the_login_page_is_ours_and_logs_in(guild, admin_user):
    client = Client()
    page = client.get(reverse("login"))
    assert page.status_code == 200
    assert b'name="username"' in page.content and b'name="password"' in page.content
    response = client.post(
        reverse("login"), {"username": "ada", "password": "correct horse battery staple"}
    )
    assert response.status_code == 302 and response["Location"] == reverse("dashboard:index")
    assert client.get(reverse("dashboard:index")).status_code == 200
    assert client.post(reverse("logout")).status_code == 302
    assert client.get(reverse("dashboard:index")).status_code == 302


def test_users_without_a_role_get_a_403_page_everywhere(guild, other_client):
    for name, path in dashboard_urls_list(guild):
        method = "post" if name in POST_ONLY else "get"
        response = getattr(other_client, method)(path)
        assert response.status_code == 403, (name, response.status_code)
    page = other_client.get(reverse("dashboard:index"))
    assert b"Not allowed" in page.content and b"moderators" in page.content


def _edit_controls(html: str) -> list[str]:
    """Inputs, selects, textareas, buttons and forms — except the logout form's and the
    read-only tools' (``class="query"``: filters, the preview, the replay dry run)."""
    html = re.sub(r'<form class="logout".*?</form>', "", html, flags=re.DOTALL)
    html = re.sub(r'<form class="query.*?</form>', "", html, flags=re.DOTALL)
    return re.findall(r"<(?:input|select|textarea|button|form)\b[^>]*>", html)


def test_moderators_see_every_screen_without_edit_controls(guild, moderator_client):
    for name, path in dashboard_urls_list(guild):
        if name in POST_ONLY or name in ADMIN_HELPERS or name in ADMIN_SCREENS:
            continue
        response = moderator_client.get(path)
        assert response.status_code == 200, (name, response.status_code)
        if response["Content-Type"].startswith("text/html"):
            assert _edit_controls(response.content.decode()) == [], name


def test_moderators_read_the_values_on_the_persona_page(guild, moderator_client):
    tomori = Persona.objects.get(guild=guild, name="Tomori")
    tomori.alternate_greetings = ["Oh. Hello.", "You again?\nGood."]
    tomori.save(update_fields=["alternate_greetings"])
    page = moderator_client.get(reverse("dashboard:persona", args=[guild.guild_id, tomori.pk]))
    html = page.content.decode()
    assert "You are Tomori, a quiet poet." in html and "tomori, tomo" in html
    assert "<blockquote>Oh. Hello.</blockquote><blockquote>You again?<br>Good.</blockquote>" in html
    assert "moderator (read-only)" in html


def test_every_configuration_post_from_a_moderator_answers_403_and_changes_nothing(
    guild, moderator_client
):
    before = GuildConfig.objects.get(pk=guild.pk)
    for name, path in dashboard_urls_list(guild):
        if name in GET_ONLY or name in VIEWER_POSTS:
            continue
        response = moderator_client.post(path, {"name": "Hijacked", "message_fetch_limit": 50})
        assert response.status_code == 403, (name, response.status_code)
    after = GuildConfig.objects.get(pk=guild.pk)
    assert (after.name, after.updated_at) == (before.name, before.updated_at)
    assert Persona.objects.filter(guild=guild).count() == 2


def test_admins_open_every_screen(guild, admin_client):
    for name, path in dashboard_urls_list(guild):
        if name in POST_ONLY:
            continue
        assert admin_client.get(path).status_code == 200, name


def test_secrets_are_never_rendered(guild, admin_client, moderator_client, settings):
    settings.LLM_API_KEY = "sk-llm-secret-0123456789"
    settings.DISCORD_TOKEN = "discord-secret-token-9876543210"
    settings.DISCORD_API_BASE = "http://127.0.0.1:9/api/v10"  # the preview logs in: fails here
    for client in (admin_client, moderator_client):
        for name, path in dashboard_urls_list(guild):
            if name in POST_ONLY or name in ADMIN_HELPERS:
                continue
            body = client.get(path).content
            assert b"sk-llm-secret" not in body and b"discord-secret-token" not in body, name


def test_htmx_requests_carry_the_csrf_token(guild, admin_client):
    html = admin_client.get(reverse("dashboard:index")).content.decode()
    assert re.search(r"<body hx-headers='\{\"X-CSRFToken\": \"[\w-]{20,}\"\}'>", html)


def test_login_url_setting_points_at_our_login_page():
    assert reverse(settings.LOGIN_URL) == "/accounts/login/"
