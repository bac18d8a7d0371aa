"""Every configuration screen keeps every setting: a row whose every key differs from its
default, opened and saved unchanged by an admin, exports exactly as before (line breaks
included: the browser sends ``\\r\\n``, the database keeps ``\\n``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from django.urls import reverse

from dashboard.forms import BlockForm, ChannelForm, GuildForm, PersonaForm, UserPrivacyForm
from dashboard.tests.submitted_form import submitted_form
from personas.models import Block, Persona
from personas.selectors import config_export
from personas.services import config_import

pytestmark = pytest.mark.django_db

GUILD = "1100000000000000001"
PRESET = json.loads(
    (Path(__file__).parents[2] / "chat" / "tests" / "fixtures" / "st_chat_preset.json").read_text()
)
LOREBOOK = {
    "name": "Band lore",
    "description": "What the band knows",
    "scan_depth": 5,
    "token_budget": 300,
    "recursive_scanning": True,
    "extensions": {"kept": "as is"},
    "entries": [
        {
            "id": 3,
            "name": "Studio",
            "comment": "a note",
            "keys": ["studio", "rehearsal"],
            "secondary_keys": ["tonight"],
            "content": "The studio is in Shibuya.\nIt floods when it rains.",
            "enabled": False,
            "constant": True,
            "selective": True,
            "selective_logic": "not_all",
            "insertion_order": 7,
            "priority": 2,
            "case_sensitive": True,
            "match_whole_words": True,
            "use_regex": False,
            "position": "at_depth",
            "depth": 6,
            "role": "user",
            "probability": 60,
            "exclude_recursion": True,
            "prevent_recursion": True,
        }
    ],
}
PERSONA = {
    "name": "Anon",
    "main": False,
    "answers_dms": True,
    "enabled": False,
    "avatar_url": "https://example.org/anon.png",
    "system_prompt": "You are Anon.\nLoud, cheerful.\n\n  Indented line, trailing space ",
    "triggers": ["anon", "chihaya"],
    "context_note": {"text": "Anon is late.\nAgain.", "depth": 9},
    "prefill": "Anon:\n",
    "deliberate_tool_mode": False,
    "tools_enabled": False,
    "short_term_memory": {"refresh_every": 9, "depth": 3},
    "force_lowercase": True,
    "punctuation_splits": True,
    "delivery_mode": "whole",
    "sample_dialogue": [
        {"role": "user", "content": "{user}: hi\nthere"},
        {"role": "assistant", "content": "{char}: yo!"},
    ],
    "first_mes": "Hey!\nYou came.",
    "alternate_greetings": ["Oh, {user}.", "Welcome\nback."],
    "llm": {
        "model": "llama3.1:8b",
        "temperature": 1.1,
        "max_output_tokens": 256,
        "context_window": 8000,
        "fallback_models": [
            "qwen2.5:7b",
            {
                "model": "mistral",
                "api": "completions",
                "instruct_template": "mistral",
                "context_window": 4096,
            },
        ],
        "api": "completions",
        "instruct_template": "llama3",
        "vision": True,
        "prefill": False,
        "merge_same_role": True,
        "reasoning_in_think_tags": True,
        "verbatim_tool_nudge": True,
    },
    "lorebook": LOREBOOK,
    "chat_preset": PRESET,
    "limits": {"tokens_per_day": 5000, "usd_per_month": "3.50"},
}
DOCUMENT = {
    "version": 1,
    "guilds": [
        {
            "id": GUILD,
            "name": "Hoshimi Lounge",
            "timezone": "Europe/Paris",
            "message_fetch_limit": 55,
            "context_note": {"text": "Short answers.\nNo spoilers.", "depth": 7},
            "lorebook": LOREBOOK,
            "chat_preset": PRESET,
            "planner_model": "qwen2.5:3b",
            "limits": {
                "tokens_per_day": 90000,
                "usd_per_month": "12.5",
                "user_turns": {"count": 3, "per_seconds": 45},
                "notice": "Resting.\nBack tomorrow.",
            },
            "personas": [
                {"name": "Tomori", "main": True, "system_prompt": "You are Tomori."},
                PERSONA,
            ],
            "channels": [
                {
                    "id": "1200000000000000001",
                    "mode": "autonomous",
                    "enabled": False,
                    "message_fetch_limit": 33,
                    "context_note": {"text": "Poems only.\nNo prose.", "depth": 2},
                }
            ],
            "blocks": [
                {
                    "persona": "Anon",
                    "user_id": "1300000000000000002",
                    "type": "mute",
                    "reason": "spam, twice",
                    "expires_at": "2031-05-06T07:08:09+00:00",
                }
            ],
            "users": [{"id": "1300000000000000004", "privacy": "full", "blacklisted": True}],
        }
    ],
}


@pytest.fixture
def configured(db) -> dict:
    config_import(data=copy.deepcopy(DOCUMENT))
    exported = config_export()
    anon = exported["guilds"][0]["personas"][1]
    stored_whole = {"lorebook": None, "chat_preset": None}  # kept with every default written
    assert {**anon, **stored_whole} == {**PERSONA, **stored_whole}  # no default anywhere
    assert anon["lorebook"]["entries"][0]["content"] == LOREBOOK["entries"][0]["content"]
    return exported


def _screens() -> dict[str, object]:
    return {
        "guild": lambda: reverse("dashboard:guild", args=[GUILD]),
        "persona": lambda: reverse(
            "dashboard:persona", args=[GUILD, Persona.objects.get(name="Anon").pk]
        ),
        "channel": lambda: reverse("dashboard:channel", args=[GUILD, 1200000000000000001]),
        "block": lambda: reverse("dashboard:block", args=[GUILD, Block.objects.get().pk]),
        "user": lambda: reverse("dashboard:user", args=[GUILD, 1300000000000000004]),
    }


@pytest.mark.parametrize("screen", list(_screens()))
def test_saving_a_screen_unchanged_keeps_every_setting(configured, admin_client, screen):
    url = _screens()[screen]()
    page = admin_client.get(url)
    assert page.status_code == 200
    posted = submitted_form(page.content.decode())
    assert any("\r\n" in value for values in posted.values() for value in values) or screen in (
        "block",
        "user",
    ), "the multi-line settings reach the form"

    response = admin_client.post(url, posted)

    assert response.status_code == 302, response.content.decode()[:3000]
    assert config_export() == configured


def test_a_persona_s_alternate_greetings_are_edited_one_box_each(configured, admin_client):
    url = _screens()["persona"]()
    posted = submitted_form(admin_client.get(url).content.decode())
    assert posted["alternate_greetings"] == ["Oh, {user}.", "Welcome\r\nback.", ""]

    posted["alternate_greetings"] = ["", "Welcome\r\nback.", "Hi {user}.\r\n\r\nSit down."]
    response = admin_client.post(url, posted)

    assert response.status_code == 302, response.content.decode()[:3000]
    anon = config_export()["guilds"][0]["personas"][1]
    assert anon["alternate_greetings"] == ["Welcome\nback.", "Hi {user}.\n\nSit down."]


SHOWN_BY_OWN_INPUTS = {PersonaForm: {"sample_dialogue"}}
"""Keys a form shows without a form field: the persona's sample dialogue rows are repeated
``sample_role`` / ``sample_content`` inputs."""


@pytest.mark.parametrize(
    "form",
    [GuildForm, PersonaForm, ChannelForm, BlockForm, UserPrivacyForm],
    ids=lambda f: f.__name__,
)
def test_every_declared_key_has_a_field_and_every_field_a_key(form):
    declared = {setting.path for setting in form.settings}
    shown = {path.path for path in form._shown().values()}

    assert shown <= declared
    assert declared - shown == SHOWN_BY_OWN_INPUTS.get(form, set())  # an admin edits them all
    assert set(form.base_fields) <= set(form.shown)  # no field outside the declaration
