"""Persona test cases: the schema's refusals with their JSON paths, test files imported whole
or not at all, the configuration file carrying a persona's cases, and full-privacy users
leaving saved cases."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from personas.case_schema import HISTORY_MAX, parse_case, parse_case_file
from personas.case_services import (
    cases_resolve,
    persona_case_save,
    persona_cases_import,
)
from personas.config_schema import ConfigError, UserSpec
from personas.models import GuildConfig, Persona
from personas.models_cases import PersonaTestCase
from personas.selectors import config_export, persona_cases_file
from personas.services import config_import, user_privacy_save

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "config.json"
GUILD = "1100000000000000001"
CASE = {
    "name": "greets by name",
    "guild": GUILD,
    "persona": "Tomori",
    "history": [{"author": "alice", "content": "hi everyone"}],
    "message": {"author": "alice", "content": "tomori, do you remember me?"},
    "expect": {
        "contains": ["alice"],
        "not_contains": ["As an AI"],
        "matches": "^[^\\n]{1,400}$",
        "max_chars": 400,
        "judge": "The reply stays in character as Tomori.",
    },
}


def a_file(*cases: dict) -> dict:
    return {"version": 1, "cases": [copy.deepcopy(c) for c in cases]}


def problems(data: object) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as raised:
        parse_case_file(data)
    return raised.value.problems


@pytest.fixture
def guilds(db):
    config_import(data=json.loads(FIXTURE.read_text()))


def test_the_design_files_example_parses():
    [case] = parse_case_file(a_file(CASE)).cases
    assert case.persona == "Tomori" and case.expect.max_chars == 400


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        (
            {"expect": {"matches": "([a-z]"}},
            "cases[0].expect.matches",
            "is not a valid regular expression: missing ), unterminated subpattern",
        ),
        ({"expect": {"judge": "   "}}, "cases[0].expect.judge", "is empty: write what"),
        ({"expect": {"judge": ""}}, "cases[0].expect.judge", "is empty: write what"),
        (
            {"history": [{"author": "bob", "content": "x"}] * (HISTORY_MAX + 1)},
            "cases[0].history",
            "List should have at most 100 items",
        ),
        ({"message": {"author": "alice"}}, "cases[0].message.content", "is required"),
        ({"guild": "tomori's place"}, "cases[0].guild", "must be a Discord id"),
        (
            {"expect": {"max_chars": 0}},
            "cases[0].expect.max_chars",
            "Input should be greater than or equal to 1",
        ),
        (
            {"expect": {"similar_to_baseline": 1.5}},
            "cases[0].expect.similar_to_baseline",
            "Input should be less",
        ),
        ({"expect": {"contain": ["x"]}}, "cases[0].expect.contain", "is not a known setting"),
        (
            {"message": {"author": "alice", "content": "x", "reply_to": 1}},
            "cases[0].message.reply_to",
            "must name a message of the history (0 to 0)",
        ),
        (
            {"expect": {"similar_to_baseline": 0.8}},
            "cases[0].expect.similar_to_baseline",
            "needs a baseline reply",
        ),
        (
            {"history": [{"author": "a", "content": "x", "at": "2026-12-01T10:00:00"}]},
            "cases[0].history[0].at",
            "must include a time zone offset",
        ),
    ],
)
def test_a_bad_case_is_refused_with_its_json_path(change, path, message):
    found = problems(a_file({**CASE, **change}))
    assert any(p == path and m.startswith(message) for p, m in found), found


def test_two_cases_of_one_persona_need_two_names():
    found = problems(a_file(CASE, {**CASE, "name": "GREETS BY NAME"}))
    assert found == [
        ("cases[1].name", "another case of this persona is named 'GREETS BY NAME' (cases[0].name)")
    ]


def test_one_case_of_a_form_is_checked_by_the_same_rules_with_paths_of_its_own():
    with pytest.raises(ConfigError) as raised:
        parse_case(
            {"name": "x", "message": {"author": "a", "content": "b"}, "expect": {"matches": "("}}
        )
    assert [p for p, _ in raised.value.problems] == ["expect.matches"]


def test_a_file_naming_an_unknown_guild_or_persona_is_refused_whole(guilds):
    document = parse_case_file(
        a_file(
            CASE,
            {**CASE, "name": "b", "guild": "42"},
            {**CASE, "name": "c", "persona": "Nobody"},
        )
    )
    with pytest.raises(ConfigError) as raised:
        persona_cases_import(document=document)
    assert raised.value.problems == [
        ("cases[1].guild", "no configured guild has the id 42"),
        (
            "cases[2].persona",
            "names no persona of Hoshimi Lounge: 'Nobody' (its personas: Anon, Tomori)",
        ),
    ]
    assert PersonaTestCase.objects.count() == 0  # the good case was not written either


def test_a_guild_outside_the_callers_reads_as_unknown(guilds):
    document = parse_case_file(a_file(CASE))
    with pytest.raises(ConfigError) as raised:
        cases_resolve(document=document, guild_ids=[42])
    assert raised.value.problems == [("cases[0].guild", f"no configured guild has the id {GUILD}")]


def test_importing_a_file_twice_changes_nothing_and_it_exports_back(guilds):
    document = parse_case_file(a_file(CASE, {**CASE, "name": "second", "persona": "anon"}))

    first = persona_cases_import(document=document)
    second = persona_cases_import(document=document)

    assert (first.created, first.updated) == (2, 0)
    assert (second.created, second.updated, second.unchanged) == (0, 0, 2)
    exported = persona_cases_file(personas=Persona.objects.order_by("name"))
    assert exported["cases"][0]["persona"] == "Anon" and exported["cases"][1] == CASE


def test_the_configuration_file_keeps_cases_with_their_persona(guilds):
    persona_cases_import(document=parse_case_file(a_file(CASE)))
    exported = config_export()
    [tomori] = [p for p in exported["guilds"][0]["personas"] if p["name"] == "Tomori"]
    [anon] = [p for p in exported["guilds"][0]["personas"] if p["name"] == "Anon"]
    assert tomori["tests"] == [{k: v for k, v in CASE.items() if k not in ("guild", "persona")}]
    assert "tests" not in anon  # a persona without cases writes no list

    PersonaTestCase.objects.all().delete()
    report = config_import(data=exported)
    assert report.counts["PersonaTestCase"]["created"] == 1
    assert config_import(data=exported).changed is False
    assert config_export() == exported


def test_a_pruning_import_deletes_the_cases_a_persona_no_longer_lists(guilds):
    persona_cases_import(document=parse_case_file(a_file(CASE, {**CASE, "name": "old"})))
    exported = config_export()
    [tomori] = [p for p in exported["guilds"][0]["personas"] if p["name"] == "Tomori"]
    tomori["tests"] = [t for t in tomori["tests"] if t["name"] != "old"]

    config_import(data=exported)
    assert PersonaTestCase.objects.count() == 2  # without prune, kept
    config_import(data=exported, prune=True)
    assert list(PersonaTestCase.objects.values_list("name", flat=True)) == ["greets by name"]


def test_a_bad_case_in_the_configuration_file_names_its_path(guilds):
    exported = config_export()
    exported["guilds"][0]["personas"][0]["tests"] = [
        {"name": "x", "message": {"author": "a", "content": "b"}, "expect": {"judge": ""}}
    ]
    with pytest.raises(ConfigError) as raised:
        config_import(data=exported)
    assert raised.value.problems[0][0] == "guilds[0].personas[0].tests[0].expect.judge"
    assert PersonaTestCase.objects.count() == 0


def test_two_cases_cannot_share_a_name_on_one_persona(guilds):
    tomori = Persona.objects.get(name="Tomori")
    spec = parse_case({k: v for k, v in CASE.items() if k not in ("guild", "persona")})
    persona_case_save(persona=tomori, spec=spec)
    with pytest.raises(ConfigError) as raised:
        persona_case_save(persona=tomori, spec=spec)
    assert raised.value.problems == [("name", "another case of Tomori is named 'greets by name'")]


def test_someone_who_chooses_full_privacy_leaves_every_saved_case(guilds):
    guild = GuildConfig.objects.get(guild_id=int(GUILD))
    tomori = Persona.objects.get(name="Tomori")
    conversation = {
        "name": "saved from a turn",
        "history": [
            {"author": "bob", "content": "morning"},
            {"author": "carol", "content": "I love the sea"},
            {"author": "bob", "content": "me too", "reply_to": 1},
            {"author": "Tomori", "content": "the sea is calm today", "persona": True},
        ],
        "message": {"author": "bob", "content": "tomori, a poem?", "reply_to": 3},
        "memories": ["About carol: carol swims", "About bob: bob sings"],
        "earlier_memories": [
            {"after": 1, "lines": ["About carol: carol dives"]},
            {"after": 2, "lines": ["About the server: the band plays on Fridays"]},
        ],
    }
    persona_case_save(
        persona=tomori, spec=parse_case(conversation), author_ids={"bob": 11, "carol": 22}
    )
    theirs = {
        **conversation,
        "name": "carol asks",
        "message": {"author": "carol", "content": "tomori?"},
    }
    persona_case_save(persona=tomori, spec=parse_case(theirs), author_ids={"bob": 11, "carol": 22})

    user_privacy_save(guild=guild, spec=UserSpec(id="22", privacy="full"))

    [case] = PersonaTestCase.objects.all()
    assert case.name == "saved from a turn"
    assert "carol" not in json.dumps(case.spec)
    assert case.spec["history"] == [
        {"author": "bob", "content": "morning"},
        {"author": "bob", "content": "me too"},
        {"author": "Tomori", "content": "the sea is calm today", "persona": True},
    ]
    assert case.spec["message"]["reply_to"] == 2
    assert case.spec["memories"] == ["About bob: bob sings"]
    assert case.spec["earlier_memories"] == [
        {"after": 1, "lines": ["About the server: the band plays on Fridays"]}
    ]
    assert case.author_ids == {"bob": "11"}
