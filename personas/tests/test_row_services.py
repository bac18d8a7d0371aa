"""The per-row configuration services the dashboard saves through."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import DatabaseError, connection

from personas.config_schema import ConfigError, parse_config_row
from personas.models import Block, GuildConfig, Persona
from personas.services import config_import, config_row_delete, persona_save

pytestmark = pytest.mark.django_db

FIXTURE = Path(__file__).parent / "fixtures" / "config.json"


@pytest.fixture
def guild() -> GuildConfig:
    config_import(data=json.loads(FIXTURE.read_text()))
    return GuildConfig.objects.get(guild_id=1100000000000000001)


@pytest.fixture
def actor() -> User:
    return User.objects.create_user("ada", is_staff=True)


def spec(**row):
    return parse_config_row("personas", {"name": "Rikki", **row})


def test_a_row_is_validated_with_the_files_rules_and_paths_relative_to_it():
    with pytest.raises(ConfigError) as error:
        parse_config_row(
            "personas",
            {"name": "x", "llm": {"max_output_tokens": 900, "context_window": 800}},
        )
    assert error.value.problems == [("llm.context_window", "must be larger than max_output_tokens")]
    with pytest.raises(ConfigError) as error:
        parse_config_row("blocks", {"persona": "Nobody", "user_id": "1"}, persona_names=["Tomori"])
    assert error.value.problems == [("persona", "names no persona of this guild: 'Nobody'")]


def test_saving_a_persona_unchanged_logs_and_announces_nothing(
    guild, actor, django_capture_on_commit_callbacks
):
    tomori = Persona.objects.get(guild=guild, name="Tomori")
    row = json.loads(FIXTURE.read_text())["guilds"][0]["personas"][0]
    with django_capture_on_commit_callbacks() as callbacks:
        persona_save(
            guild=guild, spec=parse_config_row("personas", row), persona=tomori, actor=actor
        )
    assert callbacks == []
    assert not LogEntry.objects.exists()


def test_a_failed_save_leaves_the_demoted_main_persona_as_it_was(guild, actor):
    # A database rule the schema does not know refuses the new persona after the old main
    # persona was already demoted, inside the same transaction.
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the fixture's checks, done now
            cursor.execute(
                "ALTER TABLE personas_persona ADD CONSTRAINT test_forbidden_persona "
                "CHECK (name <> 'Rikki')"
            )
        else:
            cursor.execute(
                "CREATE TRIGGER test_forbidden_persona BEFORE INSERT ON personas_persona "
                "WHEN NEW.name = 'Rikki' BEGIN SELECT RAISE(ABORT, 'forbidden name'); END"
            )
    with pytest.raises(DatabaseError):
        persona_save(guild=guild, spec=spec(main=True), actor=actor)
    assert Persona.objects.get(guild=guild, name="Tomori").is_main
    assert not Persona.objects.filter(name="Rikki").exists()
    assert not LogEntry.objects.exists()


def test_deleting_a_persona_takes_its_blocks_and_is_logged(guild, actor):
    tomori = Persona.objects.get(guild=guild, name="Tomori")
    assert Block.objects.filter(persona=tomori).exists()
    config_row_delete(instance=tomori, actor=actor)
    assert not Block.objects.filter(persona_id=tomori.pk).exists()
    entry = LogEntry.objects.get()
    assert entry.is_deletion() and entry.object_id == str(tomori.pk) and entry.user == actor
