"""Admins change configuration in the browser: one set of rules with importconfig, inline
errors, nothing half-saved, every change logged and announced to the bot workers."""

from __future__ import annotations

import io
import json

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from botproject.live_updates import CONTROL_GROUP
from chat.pipeline.tokens import default_token_counter
from chat.services.slash_commands import privacy_set
from dashboard.tests.submitted_form import submitted_form
from personas.config_schema import CONFIG_FILE_MAX_BYTES
from personas.models import Block, ChannelConfig, GuildConfig, Persona, UserPrivacy
from personas.selectors import config_export

pytestmark = pytest.mark.django_db(transaction=True)


def snapshot() -> dict:
    """Every configuration row with its timestamps, to prove a refused save wrote nothing."""
    return {
        model.__name__: sorted(model.objects.values_list(), key=repr)
        for model in (GuildConfig, Persona, ChannelConfig, Block, UserPrivacy)
    }


def persona_post(**overrides) -> dict:
    data = {
        "name": "Rikki",
        "enabled": "on",
        "avatar_url": "",
        "system_prompt": "You are Rikki, the drummer.",
        "triggers": "rikki, drums",
        "note_text": "",
        "note_depth": "4",
        "prefill": "",
        "deliberate_tool_mode": "on",
        "tools_enabled": "on",
        "short_term_memory_refresh_every": "5",
        "delivery_mode": "paragraphs",
        "llm_model": "",
        "temperature": "0.7",
        "max_output_tokens": "512",
        "context_window": "16000",
        "fallback_models": "",
        "sample_role": ["user", "assistant", "user"],
        "sample_content": ["{user}: hi", "{char}: yo!", ""],
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}


class ControlInbox:
    """A member of the bot.control group, as a running worker is."""

    def __init__(self) -> None:
        self.layer = get_channel_layer()
        self.name = async_to_sync(self.layer.new_channel)()
        async_to_sync(self.layer.group_add)(CONTROL_GROUP, self.name)

    def receive(self) -> dict:
        return async_to_sync(self.layer.receive)(self.name)

    def close(self) -> None:
        async_to_sync(self.layer.group_discard)(CONTROL_GROUP, self.name)


@pytest.fixture
def control_inbox():
    inbox = ControlInbox()
    yield inbox
    inbox.close()


def test_admin_creates_a_persona_with_sample_dialogue_and_the_workers_are_told(
    guild, admin_client, admin_user, control_inbox
):
    response = admin_client.post(
        reverse("dashboard:persona_new", args=[guild.guild_id]), persona_post()
    )
    rikki = Persona.objects.get(guild=guild, name="Rikki")
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:persona", args=[guild.guild_id, rikki.pk])
    assert rikki.triggers == ["rikki", "drums"]
    assert rikki.sample_dialogue == [
        {"role": "user", "content": "{user}: hi"},
        {"role": "assistant", "content": "{char}: yo!"},
    ]
    message = control_inbox.receive()
    assert message["type"] == "config.changed"
    assert message["guild_ids"] == [str(guild.guild_id)]
    entry = LogEntry.objects.get(object_id=str(rikki.pk))
    assert entry.user == admin_user and entry.is_addition()


def test_the_persona_form_sets_the_delivery_mode_and_shows_it_again(guild, admin_client):
    admin_client.post(
        reverse("dashboard:persona_new", args=[guild.guild_id]),
        persona_post(delivery_mode="edit"),
    )
    rikki = Persona.objects.get(guild=guild, name="Rikki")
    assert rikki.delivery_mode == "edit"
    page = admin_client.get(reverse("dashboard:persona", args=[guild.guild_id, rikki.pk]))
    assert b'<option value="edit" selected>' in page.content


def test_bad_persona_input_is_shown_inline_and_nothing_is_saved(guild, admin_client):
    before = snapshot()
    response = admin_client.post(
        reverse("dashboard:persona_new", args=[guild.guild_id]),
        persona_post(
            name="  ",
            temperature="5",
            note_depth="500",
            avatar_url="ftp://nope",
            sample_role=["robot"],
            sample_content=["beep"],
        ),
    )
    assert response.status_code == 400
    form = response.context["form"]
    assert form.errors["name"] == ["String should have at least 1 character"]
    assert form.errors["temperature"] == ["Input should be less than or equal to 2"]
    assert form.errors["note_depth"] == ["Input should be less than or equal to 100"]
    assert "avatar_url" in form.errors
    assert form.sample_errors == {0: ["Input should be 'user' or 'assistant'"]}
    html = response.content.decode()
    assert "Nothing was saved." in html and "Input should be less than or equal to 2" in html
    assert snapshot() == before


def test_the_import_cross_checks_apply_in_the_form(guild, admin_client):
    tomori = Persona.objects.get(guild=guild, name="Tomori")
    before = snapshot()
    response = admin_client.post(
        reverse("dashboard:persona", args=[guild.guild_id, tomori.pk]),
        persona_post(name="Tomori", max_output_tokens="9000", context_window="8000"),
    )
    assert response.status_code == 400
    assert response.context["form"].errors["context_window"] == [
        "must be larger than max_output_tokens"
    ]
    assert snapshot() == before


def test_a_persona_name_taken_in_the_guild_is_refused_inline(guild, admin_client):
    before = snapshot()
    response = admin_client.post(
        reverse("dashboard:persona_new", args=[guild.guild_id]), persona_post(name="ANON")
    )
    assert response.status_code == 400
    assert response.context["form"].errors["name"] == [
        "another persona of this guild is named 'ANON'"
    ]
    assert snapshot() == before


def test_editing_renames_and_making_main_demotes_the_old_main_in_one_save(
    guild, admin_client, admin_user
):
    anon = Persona.objects.get(guild=guild, name="Anon")
    response = admin_client.post(
        reverse("dashboard:persona", args=[guild.guild_id, anon.pk]),
        persona_post(name="Anon Chihaya", main="on", triggers="anon, chihaya"),
    )
    assert response.status_code == 302
    anon.refresh_from_db()
    assert (anon.name, anon.is_main, anon.triggers) == ("Anon Chihaya", True, ["anon", "chihaya"])
    assert not Persona.objects.get(guild=guild, name="Tomori").is_main
    # The mute naming Anon still points at the renamed persona.
    assert Block.objects.get(user_id=1300000000000000002).persona == anon
    page = admin_client.get(reverse("dashboard:persona", args=[guild.guild_id, anon.pk]))
    changes = page.context["changes"]
    assert changes[0].actor == admin_user
    assert {"field": "name", "before": "Anon", "after": "Anon Chihaya"} in changes[0].changes
    assert {"field": "is_main", "before": False, "after": True} in changes[0].changes
    assert "ada" in page.content.decode()


def test_deleting_a_persona_removes_it_and_is_logged(guild, admin_client, admin_user):
    anon = Persona.objects.get(guild=guild, name="Anon")
    response = admin_client.post(
        reverse("dashboard:persona_delete", args=[guild.guild_id, anon.pk])
    )
    assert response.status_code == 302
    assert not Persona.objects.filter(pk=anon.pk).exists()
    assert LogEntry.objects.get(object_id=str(anon.pk)).is_deletion()


def test_guild_settings_are_saved_and_bad_ones_refused_inline(guild, admin_client):
    url = reverse("dashboard:guild", args=[guild.guild_id])
    good = {
        "name": "Hoshimi",
        "timezone": "Europe/Paris",
        "message_fetch_limit": "60",
        "note_text": "Be kind.",
        "note_depth": "3",
    }
    assert admin_client.post(url, good).status_code == 302
    guild.refresh_from_db()
    assert (guild.name, guild.timezone, guild.message_fetch_limit, guild.context_note_depth) == (
        "Hoshimi",
        "Europe/Paris",
        60,
        3,
    )
    before = snapshot()
    response = admin_client.post(
        url, {**good, "timezone": "Mars/Olympus", "message_fetch_limit": "500"}
    )
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert "is not an IANA time zone name" in errors["timezone"][0]
    assert errors["message_fetch_limit"] == ["Input should be less than or equal to 100"]
    assert snapshot() == before


@pytest.mark.parametrize(
    ("typed", "stored", "shown"),
    [
        ("off", "off", "off"),
        ("", "on", "on"),
        ("ON", "on", "on"),
        ("violence, harassment", ["harassment", "violence"], "harassment, violence"),
    ],
)
def test_a_guilds_moderation_is_set_on_its_page(guild, admin_client, typed, stored, shown):
    url = reverse("dashboard:guild", args=[guild.guild_id])
    form = {"name": guild.name, "timezone": guild.timezone, "message_fetch_limit": "80"}
    form |= {"note_depth": "4", "moderation": typed, "moderation_input": "on"}

    assert admin_client.post(url, form).status_code == 302

    guild.refresh_from_db()
    assert (guild.moderation, guild.moderation_input) == (stored, True)
    again = submitted_form(admin_client.get(url).content.decode())
    assert (again["moderation"], again["moderation_input"]) == ([shown], ["on"])


def test_a_moderation_list_holding_sexual_minors_is_refused_inline(guild, admin_client):
    url = reverse("dashboard:guild", args=[guild.guild_id])
    form = {"name": guild.name, "timezone": guild.timezone, "message_fetch_limit": "80"}
    form |= {"note_depth": "4", "moderation": "violence, sexual/minors"}
    before = snapshot()

    response = admin_client.post(url, form)

    assert response.status_code == 400
    assert response.context["form"].errors["moderation"] == ["sexual/minors can never be allowed"]
    assert snapshot() == before


def test_a_new_guild_is_added_by_id(db, admin_client):
    response = admin_client.post(
        reverse("dashboard:guild_new"),
        {
            "guild_id": "1400000000000000001",
            "name": "New place",
            "timezone": "UTC",
            "message_fetch_limit": "80",
            "note_depth": "4",
        },
    )
    assert response.status_code == 302
    assert GuildConfig.objects.get(guild_id=1400000000000000001).name == "New place"
    refused = admin_client.post(
        reverse("dashboard:guild_new"),
        {
            "guild_id": "12ab",
            "name": "x",
            "timezone": "UTC",
            "message_fetch_limit": "80",
            "note_depth": "4",
        },
    )
    assert refused.context["form"].errors["guild_id"] == [
        "must be a Discord id: a string of digits"
    ]


def test_channels_are_added_and_edited_with_the_import_rules(guild, admin_client):
    url = reverse("dashboard:channel_list", args=[guild.guild_id])
    data = {
        "channel_id": "1200000000000000009",
        "mode": "autonomous",
        "note_text": "Hi",
        "note_depth": "2",
        "enabled": "on",
        "message_fetch_limit": "",
    }
    assert admin_client.post(url, data).status_code == 302
    channel = ChannelConfig.objects.get(channel_id=1200000000000000009)
    assert (channel.mode, channel.message_fetch_limit, channel.context_note) == (
        "autonomous",
        None,
        "Hi",
    )
    before = snapshot()
    response = admin_client.post(
        reverse("dashboard:channel", args=[guild.guild_id, channel.channel_id]),
        {**data, "mode": "chaotic", "message_fetch_limit": "5"},
    )
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert "Select a valid choice" in errors["mode"][0]
    assert snapshot() == before
    response = admin_client.post(
        reverse("dashboard:channel", args=[guild.guild_id, channel.channel_id]),
        {**data, "message_fetch_limit": "5"},
    )
    assert response.context["form"].errors["message_fetch_limit"] == [
        "Input should be greater than or equal to 20"
    ]


def test_blocks_name_a_persona_or_all_and_may_expire(guild, admin_client):
    url = reverse("dashboard:block_list", args=[guild.guild_id])
    response = admin_client.post(
        url,
        {
            "persona": "",
            "user_id": "1300000000000000077",
            "type": "mute",
            "reason": "flood",
            "expires_at": "2030-05-01T12:30",
        },
    )
    assert response.status_code == 302
    block = Block.objects.get(user_id=1300000000000000077)
    assert block.persona is None and block.type == "mute"
    assert block.expires_at.isoformat() == "2030-05-01T12:30:00+00:00"
    before = snapshot()
    duplicate = admin_client.post(
        url, {"persona": "", "user_id": "1300000000000000077", "type": "mute"}
    )
    assert duplicate.status_code == 400
    assert duplicate.context["form"].errors["user_id"] == [
        "this user already has that block for that persona"
    ]
    assert snapshot() == before


def test_user_privacy_is_set_by_user_id(guild, admin_client):
    url = reverse("dashboard:user_list", args=[guild.guild_id])
    assert (
        admin_client.post(url, {"user_id": "1300000000000000050", "privacy": "partial"}).status_code
        == 302
    )
    assert UserPrivacy.objects.get(user_id=1300000000000000050).level == "partial"
    bad = admin_client.post(url, {"user_id": "99999999999999999999", "privacy": "full"})
    assert bad.context["form"].errors["user_id"] == ["is too large to be a Discord id"]


def test_the_token_count_uses_the_pipelines_tokenizer(db, admin_client):
    text = "You are Tomori, a quiet girl who writes poetry."
    response = admin_client.post(reverse("dashboard:token_count"), {"system_prompt": text})
    expected = default_token_counter().count(text)
    assert response.status_code == 200
    assert f'data-tokens="{expected}"' in response.content.decode()
    assert expected != default_token_counter().count(text + " And sings.")


def test_avatar_preview_shows_only_urls_the_schema_accepts(db, admin_client):
    url = reverse("dashboard:avatar_preview")
    good = admin_client.get(url, {"avatar_url": "https://example.org/a.png"}).content.decode()
    assert 'src="https://example.org/a.png"' in good
    bad = admin_client.get(url, {"avatar_url": "javascript:alert(1)"}).content.decode()
    assert "<img" not in bad


def test_export_downloads_what_exportconfig_prints(guild, admin_client):
    response = admin_client.get(reverse("dashboard:config_export"))
    assert response["Content-Disposition"] == 'attachment; filename="guilds.json"'
    assert json.loads(response.content) == config_export()


def _upload(content: bytes, name: str = "guilds.json") -> io.BytesIO:
    upload = io.BytesIO(content)
    upload.name = name
    return upload


def test_import_shows_the_report(guild, admin_client, admin_user):
    document = config_export()
    document["guilds"][0]["personas"][1]["system_prompt"] = "You are Anon, louder."
    response = admin_client.post(
        reverse("dashboard:config_import"), {"file": _upload(json.dumps(document).encode())}
    )
    assert response.status_code == 200
    assert "Persona: 1 updated" in response.content.decode()
    anon = Persona.objects.get(guild=guild, name="Anon")
    assert anon.system_prompt == "You are Anon, louder."
    assert LogEntry.objects.get(object_id=str(anon.pk)).user == admin_user


def test_import_with_problems_lists_their_json_paths_and_changes_nothing(guild, admin_client):
    document = config_export()
    document["guilds"][0]["name"] = "Renamed"
    document["guilds"][0]["personas"][1]["context_note"]["depth"] = 500
    document["guilds"][0]["users"][0]["privacy"] = "secret"
    before = snapshot()
    response = admin_client.post(
        reverse("dashboard:config_import"), {"file": _upload(json.dumps(document).encode())}
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "nothing was changed" in html
    assert "<code>guilds[0].personas[1].context_note.depth</code>" in html
    assert "<code>guilds[0].users[0].privacy</code>" in html
    assert snapshot() == before


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        pytest.param(b" " * (CONFIG_FILE_MAX_BYTES + 1), "is larger than 4,194,304", id="big"),
        pytest.param(b"{nope", "is not valid JSON", id="broken"),
        pytest.param(b"\xff\xfe{}", "is not UTF-8 text", id="utf-16"),
        pytest.param(b"[" * 20, "is not valid JSON", id="unbalanced"),
        pytest.param(b"[" * 200_000 + b"]" * 200_000, "nested too deeply", id="deep"),
        pytest.param(b'{"version": 1, "guilds": [' + b"9" * 5000 + b"]}", "too large", id="int"),
    ],
)
def test_the_upload_reads_files_as_importconfig_does(guild, admin_client, raw, words):
    before = snapshot()

    response = admin_client.post(reverse("dashboard:config_import"), {"file": _upload(raw)})

    assert response.status_code == 400
    assert "nothing was changed" in response.content.decode()
    assert words in response.content.decode()
    assert snapshot() == before


def test_the_upload_accepts_a_byte_order_mark(guild, admin_client):
    document = config_export()
    document["guilds"][0]["name"] = "Renamed"
    raw = "\ufeff".encode() + json.dumps(document).encode()

    response = admin_client.post(reverse("dashboard:config_import"), {"file": _upload(raw)})

    assert response.status_code == 200
    assert GuildConfig.objects.get(guild_id=guild.guild_id).name == "Renamed"


def test_the_persona_page_says_what_user_in_a_system_prompt_costs(guild, admin_client):
    tomori = Persona.objects.get(guild=guild, name="Tomori")

    page = admin_client.get(reverse("dashboard:persona", args=[guild.guild_id, tomori.pk]))

    assert "cannot reuse its cached prompt" in page.content.decode()


def test_the_user_privacy_screen_says_who_set_each_level(guild, admin_client):
    url = reverse("dashboard:user_list", args=[guild.guild_id])
    admin_client.post(url, {"user_id": "1300000000000000050", "privacy": "partial"})
    privacy_set(guild_id=guild.guild_id, user_id=1300000000000000051, level="full")

    page = admin_client.get(url).content.decode()

    assert UserPrivacy.objects.get(user_id=1300000000000000050).set_by == "admin"
    assert UserPrivacy.objects.get(user_id=1300000000000000051).set_by == "user"
    assert "An admin, " in page.split('data-id="1300000000000000050"', 1)[1].split("</tr>")[0]
    assert (
        "The user (/privacy), "
        in page.split('data-id="1300000000000000051"', 1)[1].split("</tr>")[0]
    )
