"""importconfig / exportconfig: validation with JSON paths, one transaction, idempotence."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from personas.config_schema import ConfigError
from personas.models import Block, ChannelConfig, GuildConfig, Persona, UserPrivacy
from personas.selectors import config_export
from personas.services import config_import

pytestmark = pytest.mark.django_db

FIXTURE = Path(__file__).parent / "fixtures" / "config.json"


@pytest.fixture
def document() -> dict:
    return json.loads(FIXTURE.read_text())


def snapshot() -> dict:
    """Everything the import can touch, including timestamps, to prove nothing changed."""
    return {
        model.__name__: sorted(model.objects.values_list(), key=repr)
        for model in (GuildConfig, Persona, ChannelConfig, Block, UserPrivacy)
    }


def test_import_creates_the_whole_guild(document):
    report = config_import(data=document)

    guild = GuildConfig.objects.get(guild_id=1100000000000000001)
    assert (guild.name, guild.timezone, guild.context_note_depth) == (
        "Hoshimi Lounge",
        "Asia/Tokyo",
        4,
    )
    tomori = Persona.objects.get(guild=guild, name="Tomori")
    assert tomori.is_main and tomori.triggers == ["tomori", "tomo"]
    assert (tomori.context_note, tomori.context_note_depth) == ("Tomori is tired today.", 2)
    anon = Persona.objects.get(guild=guild, name="Anon")
    assert anon.fallback_models == ["llama3.1:8b"] and anon.llm_model == ""
    assert ChannelConfig.objects.get(channel_id=1200000000000000002).message_fetch_limit == 40
    mute = Block.objects.get(user_id=1300000000000000002)
    assert (mute.persona, mute.type, mute.reason) == (anon, "mute", "spam")
    assert UserPrivacy.objects.get(user_id=1300000000000000003).level == "full"
    assert UserPrivacy.objects.get(user_id=1300000000000000004).blacklisted
    assert report.counts["Persona"]["created"] == 2


def test_importing_the_same_file_twice_changes_nothing(document):
    config_import(data=document)
    before = snapshot()

    report = config_import(data=document)

    assert not report.changed
    assert report.summary().startswith("No changes")
    assert snapshot() == before


def test_export_then_import_round_trips(document):
    config_import(data=document)
    exported = config_export()
    before = snapshot()

    report = config_import(data=json.loads(json.dumps(exported)))

    assert not report.changed
    assert snapshot() == before
    assert config_export() == exported


def test_a_user_listed_in_two_guilds_keeps_a_level_in_each_through_a_round_trip(document):
    [first] = document["guilds"]
    user = {"id": "1300000000000000099", "privacy": "full", "blacklisted": False}
    second = {
        "id": "1100000000000000999",
        "name": "Second",
        "personas": [],
        "channels": [],
        "blocks": [],
        "users": [{**user, "privacy": "minimal"}],
    }
    first["users"].append(user)
    config_import(data={**document, "guilds": [first, second]})
    exported = config_export()
    before = snapshot()

    report = config_import(data=json.loads(json.dumps(exported)))

    assert not report.changed and snapshot() == before
    rows = UserPrivacy.objects.filter(user_id=int(user["id"])).order_by("guild__guild_id")
    assert list(rows.values_list("guild__guild_id", "level")) == [
        (int(first["id"]), "full"),
        (int(second["id"]), "minimal"),
    ]


def test_export_writes_snowflakes_as_strings(document):
    config_import(data=document)
    guild = config_export()["guilds"][0]
    assert guild["id"] == "1100000000000000001"
    assert guild["blocks"][0]["user_id"] == "1300000000000000001"


def test_tools_and_short_term_memory_settings_are_imported_and_exported(document):
    config_import(data=document)

    anon, tomori = Persona.objects.get(name="Anon"), Persona.objects.get(name="Tomori")
    assert (
        anon.tools_enabled,
        anon.short_term_memory_refresh_every,
        anon.short_term_memory_depth,
    ) == (False, 8, 3)
    assert (
        tomori.tools_enabled,
        tomori.short_term_memory_refresh_every,
        tomori.short_term_memory_depth,
    ) == (True, 5, None)
    exported = {p["name"]: p for p in config_export()["guilds"][0]["personas"]}
    assert exported["Anon"]["short_term_memory"] == {"refresh_every": 8, "depth": 3}
    assert exported["Tomori"]["tools_enabled"] is True


def test_the_delivery_mode_is_imported_exported_and_checked(document):
    document["guilds"][0]["personas"][1]["delivery_mode"] = "edit"
    config_import(data=document)

    assert Persona.objects.get(name="Anon").delivery_mode == "edit"
    assert Persona.objects.get(name="Tomori").delivery_mode == "paragraphs"  # the default
    exported = {p["name"]: p for p in config_export()["guilds"][0]["personas"]}
    assert exported["Anon"]["delivery_mode"] == "edit"

    document["guilds"][0]["personas"][1]["delivery_mode"] = "typewriter"
    with pytest.raises(ConfigError) as raised:
        config_import(data=document)
    assert raised.value.problems[0][0] == "guilds[0].personas[1].delivery_mode"


def test_a_short_term_memory_cadence_below_one_is_reported_with_its_path(document):
    document["guilds"][0]["personas"][1]["short_term_memory"]["refresh_every"] = 0

    with pytest.raises(ConfigError) as raised:
        config_import(data=document)

    assert raised.value.problems[0][0] == "guilds[0].personas[1].short_term_memory.refresh_every"


def test_a_changed_value_updates_only_that_row(document):
    config_import(data=document)
    document["guilds"][0]["personas"][1]["system_prompt"] = "You are Anon, now calmer."

    report = config_import(data=document)

    assert report.counts["Persona"] == {"updated": 1, "unchanged": 1}
    assert Persona.objects.get(name="Anon").system_prompt == "You are Anon, now calmer."


def test_naming_another_main_persona_moves_the_flag(document):
    config_import(data=document)
    personas = document["guilds"][0]["personas"]
    personas[0]["main"], personas[1]["main"] = False, True

    config_import(data=document)

    assert list(Persona.objects.filter(is_main=True).values_list("name", flat=True)) == ["Anon"]


def test_main_flag_moves_even_when_the_old_main_is_not_in_the_file(document):
    config_import(data=document)
    personas = document["guilds"][0]["personas"]
    document["guilds"][0]["personas"] = [{**personas[1], "main": True}]
    document["guilds"][0]["blocks"] = []

    config_import(data=document)

    assert Persona.objects.get(name="Tomori").is_main is False
    assert Persona.objects.get(name="Anon").is_main is True


def test_prune_deletes_what_the_file_no_longer_lists(document):
    config_import(data=document)
    guild = document["guilds"][0]
    guild["personas"] = guild["personas"][:1]
    guild["channels"], guild["blocks"], guild["users"] = guild["channels"][:1], [], []

    config_import(data=document, prune=True)

    assert list(Persona.objects.values_list("name", flat=True)) == ["Tomori"]
    assert ChannelConfig.objects.count() == 1
    assert Block.objects.count() == 0 and UserPrivacy.objects.count() == 0


def test_without_prune_unlisted_rows_are_kept(document):
    config_import(data=document)
    document["guilds"][0]["personas"] = document["guilds"][0]["personas"][:1]
    document["guilds"][0]["blocks"] = document["guilds"][0]["blocks"][:1]

    config_import(data=document)

    assert Persona.objects.count() == 2


def _break(document: dict, path: tuple, value: object) -> dict:
    broken = copy.deepcopy(document)
    target = broken
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return broken


BAD_INPUTS = [
    pytest.param(
        ("guilds", 0, "message_fetch_limit"),
        "80",
        "guilds[0].message_fetch_limit",
        "valid integer",
        id="wrong-type-fetch-limit",
    ),
    pytest.param(
        ("guilds", 0, "personas", 0, "triggers"),
        "tomori",
        "guilds[0].personas[0].triggers",
        "valid list",
        id="wrong-type-triggers",
    ),
    pytest.param(
        ("guilds", 0, "users", 0, "privacy"),
        "secret",
        "guilds[0].users[0].privacy",
        "'minimal', 'partial' or 'full'",
        id="unknown-privacy-level",
    ),
    pytest.param(
        ("guilds", 0, "blocks", 0, "type"),
        "ban",
        "guilds[0].blocks[0].type",
        "'block' or 'mute'",
        id="unknown-block-type",
    ),
    pytest.param(
        ("guilds", 0, "personas", 1, "context_note"),
        {"text": "x", "depth": 101},
        "guilds[0].personas[1].context_note.depth",
        "less than or equal to 100",
        id="depth-out-of-range",
    ),
    pytest.param(
        ("guilds", 0, "personas", 1, "name"),
        "tOMORI",
        "guilds[0].personas[1].name",
        "duplicate persona name",
        id="duplicate-persona-name",
    ),
    pytest.param(
        ("guilds", 0, "personas", 1, "main"),
        True,
        "guilds[0].personas[1].main",
        "only one persona per guild can be main",
        id="two-main-personas",
    ),
    pytest.param(
        ("guilds", 0, "blocks", 1, "persona"),
        "Rana",
        "guilds[0].blocks[1].persona",
        "names no persona of this guild",
        id="block-names-unknown-persona",
    ),
    pytest.param(
        ("guilds", 0, "channels", 0, "id"),
        "12ab34",
        "guilds[0].channels[0].id",
        "string of digits",
        id="snowflake-not-digits",
    ),
    pytest.param(
        ("guilds", 0, "id"),
        1100000000000000001,
        "guilds[0].id",
        "valid string",
        id="snowflake-as-number",
    ),
    pytest.param(
        ("guilds", 0, "timezone"),
        "Mars/Olympus",
        "guilds[0].timezone",
        "not an IANA time zone",
        id="unknown-timezone",
    ),
    pytest.param(
        ("guilds", 0, "personas", 0, "llm", "temprature"),
        0.5,
        "guilds[0].personas[0].llm.temprature",
        "not a known setting",
        id="misspelt-key",
    ),
    pytest.param(
        ("guilds", 0, "blocks", 1, "expires_at"),
        "2027-01-01T00:00:00",
        "guilds[0].blocks[1].expires_at",
        "time zone offset",
        id="naive-expiry",
    ),
    pytest.param(
        ("guilds", 0, "personas", 1, "llm", "context_window"),
        200,
        "guilds[0].personas[1].llm.context_window",
        "larger than max_output_tokens",
        id="context-window-below-output",
    ),
    pytest.param(("version",), 2, "version", "Input should be 1", id="unknown-version"),
]


@pytest.mark.parametrize(("path", "value", "where", "what"), BAD_INPUTS)
def test_bad_input_names_its_json_path_and_writes_nothing(document, path, value, where, what):
    config_import(data=document)  # an existing configuration that must survive untouched
    before = snapshot()
    broken = _break(document, path, value)
    broken["guilds"][0]["name"] = "Renamed by the bad file"  # a valid change that must not land

    with pytest.raises(ConfigError) as caught:
        config_import(data=broken)

    problems = dict(caught.value.problems)
    assert where in problems, caught.value.problems
    assert what in problems[where]
    assert snapshot() == before


def test_every_problem_is_reported_at_once(document):
    broken = _break(document, ("guilds", 0, "users", 0, "privacy"), "secret")
    broken = _break(broken, ("guilds", 0, "blocks", 0, "type"), "ban")

    with pytest.raises(ConfigError) as caught:
        config_import(data=broken)

    assert {path for path, _ in caught.value.problems} == {
        "guilds[0].users[0].privacy",
        "guilds[0].blocks[0].type",
    }


def test_a_bad_second_guild_keeps_the_valid_first_one_out(document):
    second = copy.deepcopy(document["guilds"][0])
    second.update(id="1100000000000000009", name="Second", channels=[], users=[])
    second["blocks"] = [{"persona": "Nobody", "user_id": "1", "type": "block"}]
    document["guilds"].append(second)

    with pytest.raises(ConfigError):
        config_import(data=document)

    assert GuildConfig.objects.count() == 0 and Persona.objects.count() == 0


def test_command_imports_a_file_and_reports(tmp_path):
    out = io.StringIO()
    call_command("importconfig", str(FIXTURE), stdout=out)
    assert "Persona: 2 created" in out.getvalue()

    out = io.StringIO()
    call_command("importconfig", str(FIXTURE), stdout=out)
    assert "No changes" in out.getvalue()


def test_command_rejects_malformed_json_with_line_and_column(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1,\n "guilds": [}')

    with pytest.raises(CommandError, match=r"not valid JSON: .* line 2, column 13"):
        call_command("importconfig", str(bad))
    assert GuildConfig.objects.count() == 0


def test_command_lists_problems_and_says_nothing_changed(tmp_path, document):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_break(document, ("guilds", 0, "users", 0, "privacy"), "secret")))

    with pytest.raises(CommandError) as caught:
        call_command("importconfig", str(bad))

    assert "nothing was changed" in str(caught.value)
    assert "guilds[0].users[0].privacy:" in str(caught.value)


def test_command_names_a_missing_file(tmp_path):
    with pytest.raises(CommandError, match=r"cannot read .*missing\.json"):
        call_command("importconfig", str(tmp_path / "missing.json"))


def test_exportconfig_output_imports_back_unchanged(document):
    config_import(data=document)
    out = io.StringIO()
    call_command("exportconfig", stdout=out)

    report = config_import(data=json.loads(out.getvalue()))

    assert not report.changed


def test_one_persona_answers_dms_and_importing_another_takes_the_role(document):
    document["guilds"][0]["personas"][0]["answers_dms"] = True
    config_import(data=document)
    other = copy.deepcopy(document["guilds"][0])
    other["id"], other["name"] = "999999999999999999", "Other"
    other["channels"], other["blocks"], other["users"] = [], [], []
    other["personas"][0]["answers_dms"] = False
    other["personas"][1]["answers_dms"] = True

    config_import(data={"version": 1, "guilds": [other]})

    dm_personas = Persona.objects.filter(answers_dms=True).values_list("guild__name", "name")
    assert list(dm_personas) == [("Other", document["guilds"][0]["personas"][1]["name"])]


def test_two_dm_personas_in_one_file_are_reported_with_their_path(document):
    for persona in document["guilds"][0]["personas"][:2]:
        persona["answers_dms"] = True

    with pytest.raises(ConfigError) as raised:
        config_import(data=document)

    assert raised.value.problems[0][0] == "guilds[0].personas[1].answers_dms"


def test_the_planner_model_is_imported_and_exported(document):
    document["guilds"][0]["planner_model"] = "small-planner"
    config_import(data=document)

    assert GuildConfig.objects.get().planner_model == "small-planner"
    assert config_export()["guilds"][0]["planner_model"] == "small-planner"


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("off", "off"),
        ("on", "on"),
        (["violence", "sexual", "violence"], ["sexual", "violence"]),
        ([], "on"),
    ],
)
def test_a_guilds_moderation_is_imported_and_exported(document, given, stored):
    document["guilds"][0]["moderation"] = given
    document["guilds"][0]["moderation_input"] = True
    config_import(data=document)

    guild = GuildConfig.objects.get(guild_id=1100000000000000001)
    assert (guild.moderation, guild.moderation_input) == (stored, True)
    exported = config_export()["guilds"][0]
    assert (exported["moderation"], exported["moderation_input"]) == (stored, True)


def test_a_guild_is_moderated_unless_its_file_says_otherwise(document):
    config_import(data=document)

    guild = GuildConfig.objects.get(guild_id=1100000000000000001)
    assert (guild.moderation, guild.moderation_input) == ("on", False)


@pytest.mark.parametrize(
    ("given", "path", "message"),
    [
        (["violence", "sexual/minors"], "guilds[0].moderation[1]", "sexual/minors can never"),
        (["sexual/minor"], "guilds[0].moderation[0]", "is not a moderation category"),
        ("maybe", "guilds[0].moderation", "Input should be 'on' or 'off'"),
        (None, "guilds[0].moderation", "Input should be 'on' or 'off'"),
    ],
)
def test_a_moderation_setting_that_cannot_be_is_refused_with_its_path(
    document, given, path, message
):
    document["guilds"][0]["moderation"] = given
    before = snapshot()

    with pytest.raises(ConfigError) as raised:
        config_import(data=document)

    [(where, problem)] = raised.value.problems
    assert where == path and message in problem
    assert snapshot() == before
