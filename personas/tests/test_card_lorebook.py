"""Lorebooks on cards and in the configuration file: import, export, round trips, errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from personas import cards
from personas.config_schema import ConfigError, parse_config_document
from personas.models import GuildConfig, Persona
from personas.selectors import config_export
from personas.services import config_import

CARDS = Path(__file__).parent / "fixtures" / "cards"


def _card(name: str) -> dict:
    return json.loads((CARDS / name).read_text())


@pytest.fixture
def guild(db) -> GuildConfig:
    return GuildConfig.objects.create(guild_id=1500000000000000001, name="Harbour")


def _import(guild: GuildConfig, card: dict) -> Persona:
    return cards.card_import(
        guild=guild, data=json.dumps(card).encode(), media_base_url="http://h/media/"
    )


def test_a_v2_card_lorebook_becomes_the_personas_lorebook(guild):
    persona = _import(guild, _card("lore_v2.json"))
    book = persona.lorebook
    assert (book["name"], book["scan_depth"], book["token_budget"]) == ("Lighthouse lore", 3, 600)
    assert book["recursive_scanning"] is True
    lamp, keepers, sea, archive = book["entries"]
    assert lamp["keys"] == ["lamp", "lantern"] and lamp["content"].startswith("The lamp of {char}")
    assert (lamp["position"], lamp["selective_logic"], lamp["match_whole_words"]) == (
        "before_char",
        "and_all",
        True,
    )
    assert (lamp["priority"], lamp["insertion_order"], lamp["prevent_recursion"]) == (10, 50, True)
    assert (keepers["position"], keepers["depth"], keepers["role"]) == ("at_depth", 2, "user")
    assert (keepers["selective_logic"], keepers["probability"]) == ("not_any", 40)
    assert (keepers["case_sensitive"], keepers["exclude_recursion"]) == (True, True)
    assert keepers["extensions"]["sticky"] == 2  # what the product does not use is kept
    assert (sea["enabled"], sea["constant"], sea["probability"]) == (False, True, 100)
    assert archive["position"] == "after_char"


@pytest.mark.parametrize("name", ["lore_v2.json"])
def test_a_card_lorebook_exports_exactly_as_imported(guild, name):
    card = _card(name)
    persona = _import(guild, card)
    exported = cards.card_from_persona(persona)["data"]["character_book"]
    assert exported == card["data"]["character_book"]


def test_a_v3_cards_decorators_and_regex_keys_are_read_and_given_back(guild):
    card = _card("lore_v3.json")
    persona = _import(guild, card)
    (ferry,) = persona.lorebook["entries"]
    assert ferry["content"] == "The ferry leaves at dawn."
    assert (ferry["position"], ferry["depth"], ferry["role"]) == ("at_depth", 1, "assistant")
    assert ferry["use_regex"] is True
    exported = cards.card_from_persona(persona)["data"]["character_book"]
    assert (
        exported["entries"][0]["content"] == card["data"]["character_book"]["entries"][0]["content"]
    )
    again = cards.lorebook_from_card(exported)
    assert again["entries"] == persona.lorebook["entries"]


def test_an_edited_entry_exports_sillytaverns_extensions_for_the_change(guild):
    persona = _import(guild, _card("lore_v2.json"))
    book = copy.deepcopy(persona.lorebook)
    book["entries"][0].update(position="at_depth", depth=6, role="assistant", probability=25)
    exported = cards.character_book_from_lorebook(book)["entries"][0]
    assert exported["position"] == "after_char"
    ext = exported["extensions"]
    assert (ext["position"], ext["depth"], ext["role"]) == (4, 6, 2)
    assert (ext["probability"], ext["useProbability"]) == (25, True)
    again = cards.lorebook_from_card(cards.character_book_from_lorebook(book))["entries"][0]
    assert {k: v for k, v in again.items() if k != "extensions"} == {
        k: v for k, v in book["entries"][0].items() if k != "extensions"
    }


def test_a_card_with_a_broken_pattern_key_names_the_entry_and_creates_nothing(guild):
    card = _card("lore_v2.json")
    card["data"]["character_book"]["entries"][1]["keys"] = ["/keeper(/"]
    with pytest.raises(ConfigError) as error:
        _import(guild, card)
    assert error.value.problems[0][0] == "lorebook.entries[1].keys[0]"
    assert "regular expression" in error.value.problems[0][1]
    assert not Persona.objects.exists()


def _document(**guild) -> dict:
    return {
        "version": 1,
        "guilds": [
            {
                "id": "1500000000000000001",
                "name": "Harbour",
                "personas": [{"name": "Mirela", "lorebook": {"entries": [{"keys": ["lamp"]}]}}],
                **guild,
            }
        ],
    }


def test_persona_and_guild_lorebooks_round_trip_through_the_configuration_file(db):
    document = _document(
        lorebook={"name": "Shared", "entries": [{"keys": ["harbour"], "content": "Busy."}]}
    )
    config_import(data=document)
    exported = config_export()
    assert exported["guilds"][0]["lorebook"]["entries"][0]["content"] == "Busy."
    assert exported["guilds"][0]["personas"][0]["lorebook"]["entries"][0]["keys"] == ["lamp"]
    report = config_import(data=exported)
    assert not report.changed


@pytest.mark.parametrize(
    ("lorebook", "path", "words"),
    [
        ({"entries": [{"keys": ["/(/"]}]}, "lorebook.entries[0].keys[0]", "regular expression"),
        (
            {"entries": [{"keys": ["("], "use_regex": True}]},
            "lorebook.entries[0].keys[0]",
            "use_regex",
        ),
        ({"entries": [{"id": 1}, {"id": 1}]}, "lorebook.entries[1].id", "duplicate entry id"),
        ({"entries": [{"position": "top"}]}, "lorebook.entries[0].position", "before_char"),
        ({"entries": [{"probability": 101}]}, "lorebook.entries[0].probability", "100"),
        ({"scan_depth": -1}, "lorebook.scan_depth", "0"),
    ],
)
def test_a_bad_lorebook_names_its_json_path(lorebook, path, words):
    for where in (f"guilds[0].{path}", f"guilds[0].personas[0].{path}"):
        document = _document()
        target = document["guilds"][0]
        if ".personas[0]." in where:
            target = target["personas"][0]
        target["lorebook"] = lorebook
        with pytest.raises(ConfigError) as error:
            parse_config_document(document)
        assert any(p == where and words in m for p, m in error.value.problems), error.value
