"""A SillyTavern Chat Completion preset on a persona or a guild in the configuration file:
kept whole (its other fields too), checked where it matters, named by path when wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from personas.config_schema import ConfigError, parse_config_document
from personas.selectors import config_export
from personas.services import config_import

PRESET = json.loads(
    (Path(__file__).parents[2] / "chat" / "tests" / "fixtures" / "st_chat_preset.json").read_text()
)


def _document(**persona) -> dict:
    return {
        "version": 1,
        "guilds": [
            {
                "id": "1500000000000000001",
                "name": "G",
                "chat_preset": PRESET,
                "personas": [{"name": "Rana", **persona}],
            }
        ],
    }


def test_presets_round_trip_whole(db):
    config_import(data=_document(chat_preset=PRESET))
    exported = config_export()
    guild = exported["guilds"][0]
    assert guild["chat_preset"]["temperature"] == 0.9  # kept, not used
    assert guild["personas"][0]["chat_preset"]["prompt_order"][1]["character_id"] == 100001
    assert not config_import(data=exported).changed


@pytest.mark.parametrize(
    ("preset", "path", "words"),
    [
        ({"prompts": []}, "chat_preset.prompts", "at least 1"),
        ({"prompts": [{"name": "x"}]}, "chat_preset.prompts[0].identifier", "required"),
        (
            {"prompts": [{"identifier": "a", "injection_position": 2}]},
            "chat_preset.prompts[0].injection_position",
            "0 or 1",
        ),
        (
            {"prompts": [{"identifier": "a", "role": "narrator"}]},
            "chat_preset.prompts[0].role",
            "'system'",
        ),
    ],
)
def test_a_bad_preset_names_its_path(preset, path, words):
    with pytest.raises(ConfigError) as error:
        parse_config_document(_document(chat_preset=preset))
    where = f"guilds[0].personas[0].{path}"
    assert any(p == where and words in m for p, m in error.value.problems), error.value.problems
