"""A lorebook is edited with its persona or guild (as JSON), checked by the import's rules, and
kept when the rest of the page is saved."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from dashboard.tests.test_views import persona_post
from personas.config_schema import CONFIG_FILE_MAX_BYTES
from personas.models import Persona

pytestmark = pytest.mark.django_db(transaction=True)

BOOK = {"entries": [{"keys": ["drums"], "content": "Rikki's kit is red."}]}


def test_a_persona_is_saved_with_its_lorebook_and_keeps_it(guild, admin_client):
    admin_client.post(
        reverse("dashboard:persona_new", args=[guild.guild_id]),
        persona_post(lorebook=json.dumps(BOOK)),
    )
    rikki = Persona.objects.get(name="Rikki")
    assert rikki.lorebook["entries"][0]["content"] == "Rikki's kit is red."
    page = admin_client.get(reverse("dashboard:persona", args=[guild.guild_id, rikki.pk]))
    shown = page.context["form"]["lorebook"].value()
    admin_client.post(
        reverse("dashboard:persona", args=[guild.guild_id, rikki.pk]),
        persona_post(
            system_prompt="Changed.",
            lorebook=page.context["form"].fields["lorebook"].prepare_value(shown),
        ),
    )
    rikki.refresh_from_db()
    assert rikki.system_prompt == "Changed."
    assert rikki.lorebook["entries"][0]["keys"] == ["drums"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "is not valid JSON"),
        (json.dumps({"entries": [{"keys": ["/(/"]}]}), "lorebook.entries[0].keys[0]"),
    ],
)
def test_a_bad_lorebook_is_refused_inline(guild, admin_client, text, message):
    response = admin_client.post(
        reverse("dashboard:persona_new", args=[guild.guild_id]), persona_post(lorebook=text)
    )
    assert response.status_code == 400
    assert message in " ".join(response.context["form"].errors["lorebook"])
    assert not Persona.objects.filter(name="Rikki").exists()


def test_the_guild_lorebook_is_saved_from_the_guild_page(guild, admin_client):
    url = reverse("dashboard:guild", args=[guild.guild_id])
    admin_client.post(
        url,
        {
            "guild_id": str(guild.guild_id),
            "name": guild.name,
            "timezone": "UTC",
            "message_fetch_limit": "80",
            "note_text": "",
            "note_depth": "4",
            "lorebook": json.dumps(BOOK),
        },
    )
    guild.refresh_from_db()
    assert guild.lorebook["entries"][0]["keys"] == ["drums"]


def test_the_test_box_says_which_entries_the_messages_would_activate(guild, admin_client):
    book = {
        "entries": [
            {"id": 1, "name": "Kit", "keys": ["drums"], "content": "Rikki's kit is red."},
            {"id": 2, "name": "Never", "keys": ["drums"], "content": "x", "probability": 0},
            {"id": 3, "name": "Bass", "keys": ["bass"], "content": "y"},
        ]
    }
    response = admin_client.post(
        reverse("dashboard:lorebook_test"),
        {"lorebook": json.dumps(book), "messages": "hello\nwho plays the drums?"},
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "These messages would activate" in html
    assert "<strong>Kit</strong>" in html and "<code>drums</code>" in html
    assert "Never (its probability roll failed)" in html
    assert "Bass" not in html


def test_the_test_box_reports_a_lorebook_that_is_not_valid_yet(guild, admin_client):
    response = admin_client.post(
        reverse("dashboard:lorebook_test"), {"lorebook": "{", "messages": "drums"}
    )
    assert "The lorebook is not valid yet" in response.content.decode()


@pytest.mark.django_db(transaction=False)
def test_moderators_cannot_use_the_test_box(guild, moderator_client):
    response = moderator_client.post(
        reverse("dashboard:lorebook_test"), {"lorebook": "{}", "messages": "drums"}
    )
    assert response.status_code == 403


def test_an_uploaded_preset_is_assigned_to_the_persona_and_a_bad_one_is_named(guild, admin_client):
    admin_client.post(reverse("dashboard:persona_new", args=[guild.guild_id]), persona_post())
    rikki = Persona.objects.get(name="Rikki")
    url = reverse("dashboard:chat_preset_upload", args=[guild.guild_id, rikki.pk])
    preset = {"name": "Mine", "prompts": [{"identifier": "main", "content": "Be brief."}]}

    admin_client.post(url, {"preset": SimpleUploadedFile("mine.json", json.dumps(preset).encode())})
    rikki.refresh_from_db()
    assert rikki.chat_preset["prompts"][0]["content"] == "Be brief."
    assert rikki.system_prompt == "You are Rikki, the drummer."  # the rest kept

    bad = {"prompts": [{"identifier": "main", "injection_position": 7}]}
    response = admin_client.post(
        url, {"preset": SimpleUploadedFile("bad.json", json.dumps(bad).encode())}, follow=True
    )
    assert "chat_preset.prompts[0].injection_position" in response.content.decode()
    rikki.refresh_from_db()
    assert rikki.chat_preset["name"] == "Mine"


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        pytest.param(b"{nope", "Preset: the file is not valid JSON", id="broken"),
        pytest.param(b"\xff\xfe{}", "Preset: the file is not UTF-8 text", id="utf-16"),
        pytest.param(b"[" * 200_000 + b"]" * 200_000, "is nested too deeply", id="deep"),
        pytest.param(b" " * (CONFIG_FILE_MAX_BYTES + 1), "is larger than 4,194,304", id="big"),
    ],
)
def test_a_preset_file_is_read_as_a_configuration_file_is(guild, admin_client, raw, words):
    admin_client.post(reverse("dashboard:persona_new", args=[guild.guild_id]), persona_post())
    rikki = Persona.objects.get(name="Rikki")
    url = reverse("dashboard:chat_preset_upload", args=[guild.guild_id, rikki.pk])

    response = admin_client.post(url, {"preset": SimpleUploadedFile("p.json", raw)}, follow=True)

    assert words in response.content.decode()
    rikki.refresh_from_db()
    assert rikki.chat_preset is None


def test_the_entry_editor_saves_rows_and_keeps_what_it_does_not_show(guild, admin_client):
    admin_client.post(reverse("dashboard:persona_new", args=[guild.guild_id]), persona_post())
    rikki = Persona.objects.get(name="Rikki")
    rikki.lorebook = {
        "name": "Band",
        "scan_depth": 3,
        "entries": [
            {"id": 7, "keys": ["drums"], "content": "Red kit.", "priority": 9,
             "extensions": {"sticky": 2}},
            {"keys": ["bass"], "content": "Old bass."},
        ],
    }  # fmt: skip
    rikki.save()
    url = reverse("dashboard:lorebook_editor", args=[guild.guild_id, rikki.pk])
    page = admin_client.get(url)
    assert page.status_code == 200 and "Red kit." in page.content.decode()

    admin_client.post(
        url,
        {
            "entry_count": "3",
            "entries-0-keys": "drums, kit",
            "entries-0-secondary_keys": "red",
            "entries-0-selective_logic": "not_any",
            "entries-0-content": "Red kit, always.",
            "entries-0-insertion_order": "5",
            "entries-0-position": "at_depth",
            "entries-0-depth": "2",
            "entries-0-role": "user",
            "entries-0-enabled": "on",
            "entries-0-match_whole_words": "on",
            "entries-1-keys": "bass",
            "entries-1-content": "Old bass.",
            "entries-1-remove": "on",
            "entries-2-keys": "/cymbals?/i",
            "entries-2-content": "Crash!",
            "entries-2-constant": "on",
            "entries-2-enabled": "on",
        },
    )
    rikki.refresh_from_db()
    book = rikki.lorebook
    assert (book["name"], book["scan_depth"]) == ("Band", 3)
    first, second = book["entries"]
    assert first["keys"] == ["drums", "kit"] and first["secondary_keys"] == ["red"]
    assert first["selective"] and first["selective_logic"] == "not_any"
    assert (first["position"], first["depth"], first["role"]) == ("at_depth", 2, "user")
    assert first["match_whole_words"] and not first["constant"]
    assert (first["id"], first["priority"], first["extensions"]) == (7, 9, {"sticky": 2})
    assert second["keys"] == ["/cymbals?/i"] and second["constant"]


def test_the_entry_editor_names_the_entry_of_a_problem_and_saves_nothing(guild, admin_client):
    admin_client.post(reverse("dashboard:persona_new", args=[guild.guild_id]), persona_post())
    rikki = Persona.objects.get(name="Rikki")
    url = reverse("dashboard:lorebook_editor", args=[guild.guild_id, rikki.pk])
    response = admin_client.post(
        url, {"entry_count": "1", "entries-0-keys": "/(/", "entries-0-content": "x"}
    )
    assert response.status_code == 400
    assert "lorebook.entries[0].keys[0]" in response.content.decode()
    rikki.refresh_from_db()
    assert rikki.lorebook is None


def test_the_guilds_lorebook_has_the_same_editor(guild, admin_client):
    url = reverse("dashboard:guild_lorebook_editor", args=[guild.guild_id])
    assert admin_client.get(url).status_code == 200
    admin_client.post(
        url,
        {
            "entry_count": "1",
            "entries-0-keys": "café",
            "entries-0-content": "Opens at nine.",
            "entries-0-enabled": "on",
        },
    )
    guild.refresh_from_db()
    assert guild.lorebook["entries"][0]["keys"] == ["café"]
    assert Persona.objects.filter(guild=guild).exists()  # the guild's rows are untouched
