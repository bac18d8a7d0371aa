"""The audit trail: a change made each way (a dashboard form, an uploaded file, importconfig,
a slash command) is recorded with its author and every field's before and after, and
``/guilds/<id>/audit/`` lists them newest first, filtered by person and by kind."""

from __future__ import annotations

import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.urls import reverse

from chat.services.slash_commands import channel_reset, privacy_set
from dashboard.tests.conftest import FIXTURE
from dashboard.tests.submitted_form import submitted_form
from personas.models import ChangeKind, ConfigChange, GuildConfig, Persona

pytestmark = pytest.mark.django_db

CALLER = 1300000000000000042
CHANNEL = 1200000000000000001


def _file_with(mutate) -> bytes:
    data = json.loads(FIXTURE.read_text())
    mutate(data["guilds"][0])
    return json.dumps(data).encode()


def _rename_guild(name: str):
    def mutate(guild: dict) -> None:
        guild["name"] = name

    return mutate


def _edit_triggers(client, guild: GuildConfig, persona: Persona, triggers: str):
    """Post the persona's page as the browser would, with only its trigger words changed."""
    url = reverse("dashboard:persona", args=[guild.guild_id, persona.pk])
    posted = submitted_form(client.get(url).content.decode())
    posted["triggers"] = [triggers]
    return client.post(url, posted)


def _audit_text(client, guild: GuildConfig, query: str = "") -> str:
    """The text of the audit page's list of changes."""
    html = client.get(reverse("dashboard:audit", args=[guild.guild_id]) + query).content.decode()
    listed = html.split('<ol class="audit">', 1)[1].split("</ol>", 1)[0]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", listed))


def test_a_change_made_each_way_is_recorded_with_its_author_and_diff(
    guild, admin_client, admin_user, tmp_path
):
    upload = SimpleUploadedFile("lounge.json", _file_with(_rename_guild("Uploaded Lounge")))
    assert (
        admin_client.post(reverse("dashboard:config_import"), {"file": upload}).status_code == 200
    )
    path = tmp_path / "guilds.json"
    path.write_bytes(_file_with(_rename_guild("Shell Lounge")))
    call_command("importconfig", str(path))
    tomori = Persona.objects.get(guild=guild, name="Tomori")
    assert _edit_triggers(admin_client, guild, tomori, "tomori, poet").status_code == 302
    privacy_set(guild_id=guild.guild_id, user_id=CALLER, level="full")

    rows = list(ConfigChange.objects.filter(guild_id=guild.guild_id).order_by("id"))
    assert [(r.kind, r.object_type, r.action) for r in rows] == [
        (ChangeKind.UPLOAD, "guild", "updated"),
        (ChangeKind.IMPORTCONFIG, "guild", "updated"),
        (ChangeKind.DASHBOARD, "persona", "updated"),
        (ChangeKind.COMMAND, "user", "created"),
    ]
    upload_row, shell, form, command = rows
    assert (form.actor, form.actor_name) == (admin_user, "ada")
    assert form.changes == [
        {"field": "triggers", "before": ["tomori", "tomo"], "after": ["tomori", "poet"]}
    ]
    assert (upload_row.actor, upload_row.via) == (admin_user, "lounge.json")
    assert upload_row.changes == [
        {"field": "name", "before": "Hoshimi Lounge", "after": "Uploaded Lounge"}
    ]
    assert shell.actor is None and shell.actor_name.endswith("(shell)")
    assert shell.via == str(path)
    assert shell.changes == [
        {"field": "name", "before": "Uploaded Lounge", "after": "Shell Lounge"}
    ]
    assert (command.actor_discord_id, command.via) == (CALLER, "/privacy")
    assert {"field": "level", "before": None, "after": "full"} in command.changes

    text = _audit_text(admin_client, guild)  # newest first
    assert text.index("/privacy") < text.index("dashboard form") < text.index("(shell)")
    assert text.index("(shell)") < text.index("lounge.json")
    assert (
        "triggers [&#x27;tomori&#x27;, &#x27;tomo&#x27;] [&#x27;tomori&#x27;, &#x27;poet&#x27;]"
        in text
    )
    assert "Hoshimi Lounge Uploaded Lounge" in text and "Uploaded Lounge Shell Lounge" in text
    assert "slash command" in text and "importconfig" in text and "upload" in text


def test_the_audit_page_filters_by_person_and_by_kind(guild, admin_client, admin_user):
    tomori = Persona.objects.get(guild=guild, name="Tomori")
    _edit_triggers(admin_client, guild, tomori, "tomori, dusk")
    privacy_set(guild_id=guild.guild_id, user_id=CALLER, level="partial")
    channel_reset(
        guild_id=guild.guild_id,
        channel_id=CHANNEL,
        user_id=CALLER,
        marker_id=1400000000000000001,
        permissions=1 << 13,
    )

    commands = _audit_text(admin_client, guild, "?kind=command")
    assert "/privacy" in commands and "/reset" in commands and "dusk" not in commands
    mine = _audit_text(admin_client, guild, f"?person=user:{admin_user.pk}")
    assert "dusk" in mine and "/privacy" not in mine
    theirs = _audit_text(admin_client, guild, f"?person=discord:{CALLER}")
    assert "/privacy" in theirs and "/reset" in theirs and "dusk" not in theirs
    reset = ConfigChange.objects.get(via="/reset")
    assert (reset.action, reset.object_label) == ("reset", str(CHANNEL))
    assert reset.changes == [
        {"field": "history starts after message", "before": None, "after": 1400000000000000001}
    ]


def test_the_persona_page_reads_its_latest_changes_from_the_audit_trail(guild, admin_client):
    tomori = Persona.objects.get(guild=guild, name="Tomori")
    _edit_triggers(admin_client, guild, tomori, "tomori, lamp")
    page = admin_client.get(reverse("dashboard:persona", args=[guild.guild_id, tomori.pk]))
    [change] = page.context["changes"]
    assert change.object_pk == str(tomori.pk) and change.kind == ChangeKind.DASHBOARD
    assert "<code>triggers</code>" in page.content.decode()


def test_a_change_that_changes_nothing_is_not_recorded(guild, admin_client):
    upload = SimpleUploadedFile("same.json", FIXTURE.read_bytes())
    assert (
        admin_client.post(reverse("dashboard:config_import"), {"file": upload}).status_code == 200
    )
    assert not ConfigChange.objects.exists()
